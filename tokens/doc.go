// Package tokens counts provider tokens of complete request bodies with
// tiktoken-go, offline (BPE files embedded, never the network), for the
// compiler's token gate.
//
// Counting a whole body costs about 0.5 s per MB, and an agent resends its
// whole history on every call, so a Counter never tokenizes the same bytes
// twice: it cuts the body at positions that are provably pre-token
// boundaries of the encoding (see split.go), counts each piece once, and
// remembers the count in a bounded cache keyed by the piece's hash. The sum
// of the pieces' counts equals a direct count of the whole body exactly. A
// new piece is counted word by word through a memo (memo.go), so only words
// never seen before reach tiktoken. Counting that cannot finish within the
// budget is reported as such and completes in the background.
package tokens
