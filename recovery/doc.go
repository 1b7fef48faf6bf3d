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
//   - Stitcher: the same loop for SSE answers (Anthropic Messages, OpenAI
//     Responses, OpenAI Chat), one client stream across rounds.
//
// Everything is pure except the API's http.Handler: no Caddy, no I/O but
// the Artifacts it is given (*vault.Store implements it) and the writer a
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
//  3. Non-streaming answer (buffered, bounded like the request): the loop
//     below.
//
//  4. Streaming answer: st, _ := NewStitcher(format,
//     w, cfg); copy the upstream body into st; r, err := st.EndRound(); while
//     r.Continue: Run(r.Calls), FollowUp(format, body, r.Answer, r.Calls),
//     send it, copy its body into st, EndRound again. On any failure call
//     st.Close(): it ends the client stream well formed from the last
//     complete round. Before st.Started() nothing reached the client, so the
//     glue may still fall back to the plain answer.
//
//  5. Upstream requests of the loop reuse the client's headers; their
//     bodies skip the compiler (they are the compiled body plus appended
//     turns).
//
// The non-streaming loop (cfg = cfg.WithDefaults()):
//
//	usage := response.Usage{}
//	for round := 0; ; round++ {
//		r := response.NewReader(format, response.Options{Keep: []string{recovery.ToolName}})
//		r.Write(answer)
//		usage = usage.Add(r.Usage())
//		calls := recovery.OwnCalls(r.ToolCalls())
//		if len(calls) == 0 || round == cfg.MaxRounds {
//			final, err := recovery.StripOwnCalls(format, answer, usage) // err: send answer as it is
//			break
//		}
//		recovery.Run(ctx, cfg, store, tenant, calls)
//		next, err := recovery.FollowUp(format, body, answer, calls)
//		// on err, or when the next upstream call fails: StripOwnCalls(answer)
//		body, answer = next, <the next upstream answer, buffered>
//	}
//
// The receipts' trailing hint ("| recover: token_terminator artifact_get]")
// and re-inlining recovered artifacts in later requests belong to the
// compiler and the glue.
package recovery
