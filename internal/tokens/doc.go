// Package tokens counts provider tokens of complete request bodies, exactly
// as tiktoken counts them, offline, for the compiler's token gate.
//
// Counting is done here, not by tiktoken-go: a hand-written pre-tokenizer
// for o200k_base and cl100k_base (pretoken.go) replaces regexp2, and a flat
// rank table read from tiktoken-go-loader's embedded files does the
// byte-pair merge (bpe.go). Both are proven equal to tiktoken-go, which the
// tests keep as the oracle: pieces and token ids, by fuzzing, on the
// committed reference counts of the official tiktoken and on the corpus.
// The tables are built once per process by New, never on a request.
//
// An agent resends its whole history on every call, so a Counter never
// tokenizes the same bytes twice: it cuts the body at positions that are
// provably pre-token boundaries of the encoding (see split.go), counts each
// piece once, and remembers the count in a bounded cache keyed by the
// piece's hash. The sum of the pieces' counts equals a direct count of the
// whole body exactly. Pre-tokens that are not tokens themselves are merged
// once and remembered (memo.go; the short ones in each worker's hot table,
// hot.go). The pieces are counted by workers that start while the body is
// still being split (job.go). Counting that cannot finish within the
// budget is reported as such and completes in the background, reading the
// body under the caller's hold or from a copy. Counters made by WithBudget
// share the caches.
package tokens
