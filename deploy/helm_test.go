package deploy_test

import "path/filepath"

// chartDir is the Helm chart.
var chartDir = path("deploy", "helm", "idemgate")

// chartRulesFile is the chart's copy of the alert rules.
var chartRulesFile = filepath.Join(chartDir, "files", "idemgate-rules.yaml")
