package gateway

import "github.com/tokenterminator/caddy-token-terminator/internal/compiler"

// Lineage along previous_response_id chains. A message's compile names
// its lineage node (compiler.Result.Chain); once the provider's
// response.completed for it has committed that node, the node is
// continued through the response's output items (compiler.Continue) and
// kept with the response's chain state. A continuation naming that
// response is compiled with the node (compiler.Request.Continues), so its
// record extends the chain the client's next whole history repeats, and
// that history's opening finds what the continuations delivered (the
// compiler's continuation.go says why the Store, not the socket, holds
// it). A response whose lineage was not committed (a pass-through the
// compiler did not record, a failed or unanswered response, a recovery
// loop that failed) continues nothing: its continuation is compiled on
// its own, as before. A recovery loop's response is continued through
// the stitched response.completed, the output the client saw and will
// re-send (endLoop).

// continuedNode is the node a continuation of m's response extends: m's
// node continued through its response.completed output, when its record
// was committed; the zero Chain otherwise.
func continuedNode(m *wsMessage, committed bool) compiler.Chain {
	if !committed || m.completed == nil || m.node.Length == 0 {
		return compiler.Chain{}
	}
	c, ok := compiler.Continue(m.node, m.completed)
	if !ok {
		return compiler.Chain{}
	}
	return c
}
