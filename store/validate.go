package store

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalid is wrapped by the error of a call whose arguments break the
// preconditions of the contract (ClaimParams.Validate, ValidateLease).
// Such a call is a bug of the caller, not a failure of the store: the
// error never wraps ErrUnavailable, and the call changes nothing.
var ErrInvalid = errors.New("invalid argument")

// MaxFingerprintBytes bounds ClaimParams.Fingerprint, in bytes.
const MaxFingerprintBytes = 128

// Validate reports whether p may be given to Claim. Every driver calls it
// first, so a driver may assume what it checks, and every driver rejects
// the same parameters (bolt used to answer Claimed to an empty
// token, a lease under 1 ms and a negative retention that the others
// rejected). The error wraps ErrInvalid and never ErrUnavailable:
//
//   - an empty Token would let two claimers both hold the record, since a
//     claim repeating the holder's token answers Claimed (contract rule 1);
//   - a Lease under the millisecond resolution would end as it starts;
//   - a negative Retention has no meaning (0 already means forever);
//   - a Fingerprint over MaxFingerprintBytes or a Recipe over
//     MaxRecipeBytes is not one that idemgate computes.
func (p ClaimParams) Validate() error {
	if p.Token == "" {
		return invalid("claim", "empty token")
	}
	if err := ValidateLease(p.Lease); err != nil {
		return err
	}
	if p.Retention < 0 {
		return invalid("claim", fmt.Sprintf("negative retention %v", p.Retention))
	}
	if len(p.Fingerprint) > MaxFingerprintBytes {
		return invalid("claim", fmt.Sprintf("fingerprint of %d bytes exceeds %d", len(p.Fingerprint), MaxFingerprintBytes))
	}
	if len(p.Recipe) > MaxRecipeBytes {
		return invalid("claim", fmt.Sprintf("recipe of %d bytes exceeds %d", len(p.Recipe), MaxRecipeBytes))
	}
	return nil
}

// ValidateLease reports whether lease may be given to Claim (as
// ClaimParams.Lease) or Extend: at least one millisecond, the resolution
// of every store, so that a lease never ends as it starts. The error wraps
// ErrInvalid and never ErrUnavailable.
func ValidateLease(lease time.Duration) error {
	if lease < time.Millisecond {
		return invalid("lease", fmt.Sprintf("%v must be >= 1ms", lease))
	}
	return nil
}

func invalid(what, detail string) error {
	return fmt.Errorf("store: %s: %w: %s", what, ErrInvalid, detail)
}
