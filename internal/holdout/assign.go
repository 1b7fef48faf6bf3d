// Package holdout assigns whole conversations to a treatment or a control
// arm and estimates, from the provider's billed usage of both arms, what the
// gateway saves and what it costs in harm, with a confidence interval.
//
// The package is pure: no I/O, no clock, no Caddy. The gateway feeds it one
// record per finished conversation (or a running sum per conversation) and
// renders what Estimate returns.
package holdout

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Arm is the side of the experiment a conversation belongs to.
type Arm uint8

const (
	// Treatment conversations are compiled as configured.
	Treatment Arm = iota
	// Control conversations go out as the client sent them; the compiler
	// may run in shadow to learn what treatment would have sent.
	Control
)

// String is the arm's name in metrics, the ledger and the page.
func (a Arm) String() string {
	if a == Control {
		return "control"
	}
	return "treatment"
}

// basisPoints is the resolution of a holdout share: 0.01%.
const basisPoints = 10000

// Share is the fraction of conversations held out, in basis points
// (1/10000), so that parsing "5%" and comparing a hash against it involve
// no floating point and agree on every machine of a fleet.
type Share uint16

// ParseShare reads a holdout share written as a percentage ("5%", "5",
// "0.5%"), refusing anything outside 0–100 or finer than 0.01%.
func ParseShare(s string) (Share, error) {
	v := strings.TrimSuffix(strings.TrimSpace(s), "%")
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 100 {
		return 0, fmt.Errorf("holdout %q: want a percentage between 0 and 100", s)
	}
	bp := f * 100
	if math.Abs(bp-math.Round(bp)) > 1e-9 {
		return 0, fmt.Errorf("holdout %q: finest step is 0.01%%", s)
	}
	return Share(math.Round(bp)), nil
}

// Percent is the share as a percentage.
func (s Share) Percent() float64 { return float64(s) / 100 }

// Assigner decides arms. Its key is a secret of the gateway (derived from
// the tenant key, which every gateway of a fleet shares), so the arm of a
// conversation is the same on every machine and after every restart, and
// neither a client nor a tenant can pick its arm by choosing content.
type Assigner struct {
	key   []byte
	share Share
}

// NewAssigner returns an assigner holding out share of conversations.
// A zero share assigns everything to Treatment.
func NewAssigner(key []byte, share Share) *Assigner {
	k := append([]byte(nil), key...)
	return &Assigner{key: k, share: share}
}

// Arm returns the arm of a conversation, identified by its tenant and its
// conversation key (stable from the conversation's first request on). An
// empty conversation key (a request whose opening could not be read) is
// Treatment: such requests are not compiled anyway, and counting them in
// either arm would bias it.
func (a *Assigner) Arm(tenant, conversation string) Arm {
	if a == nil || a.share == 0 || conversation == "" {
		return Treatment
	}
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte("holdout\x00"))
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write([]byte(conversation))
	sum := m.Sum(nil)
	if binary.BigEndian.Uint64(sum[:8])%basisPoints < uint64(a.share) {
		return Control
	}
	return Treatment
}
