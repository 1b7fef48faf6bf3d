package tokens

import "github.com/tokenterminator/caddy-token-terminator/internal/compiler"

// The compiler's counting interfaces are kept here, in a test, so the
// counter does not link the compiler.
var (
	_ compiler.TokenCounter  = (*Counter)(nil)
	_ compiler.HintedCounter = (*Counter)(nil)
	_ compiler.HeldCounter   = (*Counter)(nil)
)
