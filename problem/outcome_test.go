package problem_test

import (
	"testing"

	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/problem"
)

// TestKindOutcomesAreMetricsLabels holds each kind's outcome, which problem
// writes as a plain label so as not to import metrics, to the metrics
// constant it stands for: a label renamed in metrics and not here would
// count refusals under a series no dashboard reads.
func TestKindOutcomesAreMetricsLabels(t *testing.T) {
	want := map[problem.Kind]string{
		problem.InvalidKey:            metrics.OutcomeInvalidKey,
		problem.MissingKey:            metrics.OutcomeMissingKey,
		problem.MissingOwner:          metrics.OutcomeMissingOwner,
		problem.InvalidCredentials:    metrics.OutcomeInvalidCredentials,
		problem.BadRequest:            metrics.OutcomeBadRequest,
		problem.Ambiguous:             metrics.OutcomeBadRequest,
		problem.TooLarge:              metrics.OutcomeTooLarge,
		problem.KeyReused:             metrics.OutcomeMismatch,
		problem.InProgress:            metrics.OutcomeConflict,
		problem.NotRetained:           metrics.OutcomeAbandoned,
		problem.OutcomeUnknown:        metrics.OutcomeAbandoned,
		problem.ResourceDeleted:       metrics.OutcomeReplayed,
		problem.ShuttingDown:          metrics.OutcomeShuttingDown,
		problem.StoreUnavailable:      metrics.OutcomeStoreError,
		problem.Overloaded:            metrics.OutcomeOverloaded,
		problem.StoredResponseDamaged: metrics.OutcomeStoreError,
		problem.OwnerSourceConflict:   metrics.OutcomeStoreError,
		problem.UpstreamUnreachable:   metrics.OutcomeUpstreamError,
		problem.UpstreamFailed:        metrics.OutcomeUpstreamError,
		problem.UpstreamTimeout:       metrics.OutcomeUpstreamError,
		problem.RequestTrailers:       metrics.OutcomeBadRequest,
		problem.HTTP2Preface:          metrics.OutcomeBadRequest,
		problem.AsteriskTarget:        metrics.OutcomeBadRequest,
	}
	for _, k := range problem.Catalog() {
		label := want[k]
		if k.Outcome != label {
			t.Errorf("%s: outcome %q, want %q", k.Slug, k.Outcome, label)
		}
		delete(want, k)
	}
	for k := range want {
		t.Errorf("%s: not in problem.Catalog", k.Slug)
	}
}
