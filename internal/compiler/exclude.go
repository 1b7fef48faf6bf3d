package compiler

import "slices"

// excluded reports whether results of the named tool are never replaced
// (Options.ExcludeTools): an operator's memory or state tools, whose
// results the model must always see inline. A result that answers no call
// in the request has no name and is not excluded.
func (c *Compiler) excluded(tool string) bool {
	return tool != "" && len(c.opts.ExcludeTools) > 0 && slices.Contains(c.opts.ExcludeTools, tool)
}

// excludedTurns marks, of the first n turns, those holding a result of an
// excluded tool: such a turn never folds (compact treats it like a turn
// too large to vault), so the result stays inline where it was.
func (c *Compiler) excludedTurns(d *doc, turns []turn, offset, n int) []bool {
	out := make([]bool, len(turns))
	if len(c.opts.ExcludeTools) == 0 {
		return out
	}
	for _, s := range d.slots {
		if !c.excluded(s.tool) {
			continue
		}
		el := s.unit - offset
		for t := 0; t < n && t < len(turns); t++ {
			if el >= turns[t].first && el <= turns[t].last {
				out[t] = true
			}
		}
	}
	return out
}

// minArtifactChars is the smallest tool result the request may replace:
// the request's own setting (a per-tenant override) or the compiler's.
func (c *Compiler) minArtifactChars(req Request) int {
	if req.MinArtifactChars > 0 {
		return req.MinArtifactChars
	}
	return c.opts.MinArtifactChars
}
