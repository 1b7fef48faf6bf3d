package artifact

// TokenCount is a token measurement of one complete body.
type TokenCount struct {
	N        int
	Encoding string // e.g. "o200k_base"; empty when none applies
	// Exact is true when Encoding is the model's own tokenizer.
	Exact  bool
	Status TokenStatus
}

// TokenStatus says how a body's tokens were measured.
type TokenStatus string

const (
	TokensExact    TokenStatus = "exact"    // the model's own tokenizer
	TokensEstimate TokenStatus = "estimate" // a fixed encoding that is not the model's
	TokensNone     TokenStatus = "none"     // no tokenizer applies, or tokenizer off
	TokensBudget   TokenStatus = "budget"   // counting did not finish within the budget
)

// Measured reports whether the count is a number the gate may judge by.
func (s TokenStatus) Measured() bool { return s == TokensExact || s == TokensEstimate }

// Hold keeps a body's bytes from reuse for a reader that outlives the call
// it was given them in: it takes a reference, which release gives back; ok
// is false once the bytes may be reused, and then they must not be read
// after the call. The compiler's Request.Hold is the gateway's.
type Hold func() (release func(), ok bool)
