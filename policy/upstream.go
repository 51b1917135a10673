package policy

// SchemeH2C is the upstream URL scheme (upstream.url, a route's Upstream)
// for HTTP/2 with prior knowledge over plain TCP (RFC 9113 section 3.3),
// the usual protocol of a gRPC server behind a sidecar or inside a
// cluster: `h2c://orders:50051`. config accepts it and the proxy's
// transport answers to it; both import policy, so the word lives here once.
const SchemeH2C = "h2c"
