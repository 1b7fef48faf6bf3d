// Package recovery makes what the compiler vaulted recoverable, exactly:
// by the client through an HTTP API, and by the model through a tool the
// gateway defines and answers itself.
//
// A receipt or a folded turn removes content the model cannot get back on
// its own (models are stateless). Recovery costs nothing when it is not
// used (one constant tool definition, appended after the client's tools so
// the provider's prompt cache keeps the same prefix) and returns the exact
// stored characters when it is.
//
// # Pieces
//
//   - NewAPI: the artifact API, served under recovery_path
//     (DefaultPath): GET {path}artifacts/{id}?offset&limit returns a Page,
//     GET {path}artifacts?q&limit returns Hits. Offsets count code points.
//     Another tenant's id, an unknown id and a malformed id get the same 404.
//   - Definition, AppendTool: the token_terminator tool in each format's
//     shape, spliced into a request's tools array byte for byte.
//   - Execute / ExecuteWith / Run: answer the tool's calls with the API's
//     JSON.
//   - FollowUp: the next request of the loop (request bytes + the
//     assistant turn + our results). StripOwnCalls: the final JSON answer
//     without our calls, usage summed.
//   - Stitcher: the same for SSE answers (Anthropic Messages, OpenAI
//     Responses, OpenAI Chat), one client stream across rounds.
//   - LoopJSON, LoopStream: the whole loop around a Sender.
//
// Everything is pure except the API's http.Handler: no Caddy, no I/O but
// the Artifacts it is given (*badgervault.Store implements it) and the writer a
// Stitcher is given. Errors are returned, never half output, so the glue can
// fall back to the provider's original answer.
//
// # Intended wiring (caddymodule, to be done by the lead)
//
// The handler computes the tenant exactly as for the compiler's scope and:
//
//  1. Serves NewAPI(store, tenantOf, cfg) for paths under recovery_path
//     and never forwards them.
//
//  2. For a candidate request whose compiled body carries receipts or
//     folded turns (or whose conversation had the tool before: the
//     definition must be sticky, or the tools array changes and busts the
//     cache), forwards AppendTool(format, body). ErrToolPresent: forward
//     the body without it and do not run the loop.
//
//  3. Non-streaming answer (buffered, bounded like the request): the client
//     gets LoopJSON(ctx, cfg, store, tenant, format, body, answer, max,
//     send), where send posts a follow-up through the next handler and
//     returns the answer's body (an error for a status other than success).
//     It returns the answer itself when the model called nothing of ours.
//
//  4. Streaming answer: st, _ := NewStitcher(format, w, cfg); the upstream
//     answer's body is written into st (st is the io.Writer the glue's
//     ResponseWriter wrapper writes the body to; w is flushed after every
//     write when it has a Flush method); then st.Continue(ctx, store,
//     tenant, body, send) runs the loop, send streaming each follow-up's
//     answer into st the same way. Whatever fails, the client stream is
//     finished well formed from the last complete round. (LoopStream does
//     the same for a glue holding the first answer as an io.Reader.)
//
//  5. Upstream requests of the loop reuse the client's headers; their
//     bodies skip the compiler (they are the compiled body plus appended
//     turns).
//
// LoopJSON and LoopStream are built from the exported pieces (response
// Reader, OwnCalls, Run, FollowUp, StripOwnCalls, Stitcher), which a glue
// with other needs can drive itself.
//
// The receipts' trailing hint ("| recover: token_terminator artifact_get]")
// and re-inlining recovered artifacts in later requests belong to the
// compiler and the glue.
package recovery
