package compiler

import "context"

// Compiler compiles candidate requests. It is safe for concurrent use.
type Compiler struct {
	opts   Options
	store  Store
	tokens TokenCounter
}

// New returns a Compiler. tokens may be nil (byte gate only).
func New(opts Options, store Store, tokens TokenCounter) (*Compiler, error) {
	return &Compiler{opts: opts, store: store, tokens: tokens}, nil
}

// Compile is a placeholder being replaced by the real compiler.
func (c *Compiler) Compile(ctx context.Context, req Request) Result {
	return Result{Body: req.Body, Decision: Passthrough, Reason: "unimplemented", RawBytes: len(req.Body), SentBytes: len(req.Body)}
}

// FormatFor reports which request format a POST to path would be compiled
// as, and false when the path is not a candidate.
func FormatFor(method, path string) (string, bool) {
	return "", false
}
