package compiler

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
	"github.com/tokenterminator/caddy-token-terminator/internal/compiler/jsonv"
)

// The oracle's own reading of client wrappers and the session preamble. It
// shares no code with the compiler's rule tables (wrappers.go) nor its
// decoder: strings are decoded with encoding/json and the shapes are
// written again here, so a drift between the two fails the fuzzers.

var (
	oracleReminder  = [2]string{"<system-reminder>", "</system-reminder>"}
	oraclePreambles = [][2]string{oracleReminder, {"<environment_context>", "</environment_context>"}, {"<user_instructions>", "</user_instructions>"}, {"<session_context>", "</session_context>"}}
	oracleCodexHead = regexp.MustCompile(`^(?:(?:Chunk ID: |Wall time: |Process exited with code |Process running with session ID |Original token count: |Total output lines: |Exit code: |Warning: )[^\n]*\n){1,15}Output:\r?\n`)
)

const oracleSpace = " \t\r\n"

// oracleReceipt checks a changed tool-result value: out must be a string
// made of a receipt, with before and after it exactly the original's
// leading and trailing client wrapper parts (decoded and raw bytes alike),
// and the receipt must name the remaining body: its SHA-256 and size.
func oracleReceipt(origRaw, outRaw []byte, ids *oracleIDs) error {
	outRaw = oracleUnblock(outRaw)
	var q string
	if json.Unmarshal(outRaw, &q) != nil {
		return fmt.Errorf("changed into something other than a receipt")
	}
	i := strings.Index(q, artifact.ReceiptPrefix)
	j := -1
	if i >= 0 {
		j = strings.Index(q[i:], "…]")
	}
	if j < 0 {
		return fmt.Errorf("changed into something other than a receipt")
	}
	j += i + len("…]")
	pre, rec, post := q[:i], q[i:j], q[j:]
	o, ok := oracleText(origRaw)
	if !ok || !strings.HasPrefix(o, pre) || !strings.HasSuffix(o[len(pre):], post) {
		return fmt.Errorf("the text around the receipt is not the original's")
	}
	body := o[len(pre) : len(o)-len(post)]
	switch {
	case !oracleLeadWrapper(pre):
		return fmt.Errorf("kept text before the receipt is not a client wrapper")
	case !oracleTrailWrapper(post):
		return fmt.Errorf("kept text after the receipt is not a client wrapper")
	case oracleHasLead(body) || oracleHasTrail(body):
		return fmt.Errorf("a client wrapper part was vaulted")
	}
	if pre == "" && post == "" { // the whole value was replaced
		return ids.names(rec, body, origRaw)
	}
	var eb bytes.Buffer
	enc := json.NewEncoder(&eb)
	enc.SetEscapeHTML(false)
	if enc.Encode(rec) != nil {
		return fmt.Errorf("receipt does not encode")
	}
	rawRec := bytes.TrimSuffix(eb.Bytes(), []byte("\n"))
	rawRec = rawRec[1 : len(rawRec)-1]
	k := bytes.Index(outRaw, rawRec)
	if k < 0 {
		return fmt.Errorf("receipt is not spliced as written")
	}
	a, b := outRaw[:k], outRaw[k+len(rawRec):]
	if len(a)+len(b) > len(origRaw) || !bytes.HasPrefix(origRaw, a) || !bytes.HasSuffix(origRaw, b) {
		return fmt.Errorf("wrapper bytes changed")
	}
	return ids.names(rec, body, origRaw[len(a):len(origRaw)-len(b)])
}

// oracleUnblock returns the quoted string S of an Anthropic receipt block
// list (receipt_breakpoint.go: [{"type":"text","text":S}], with an
// optional 5-minute cache_control after S), and anything else as it is.
func oracleUnblock(raw []byte) []byte {
	s, ok := bytes.CutPrefix(raw, []byte(`[{"type":"text","text":`))
	if !ok {
		return raw
	}
	if s, ok = bytes.CutSuffix(s, []byte(`}]`)); !ok {
		return raw
	}
	s, _ = bytes.CutSuffix(s, []byte(`,"cache_control":{"type":"ephemeral"}`))
	return s
}

// oracleNames checks that a receipt names the artifact of text whose raw
// bytes are raw: the identity is sha256 over a domain, sha256(text) and
// sha256(raw), written out here independently of artifact.DigestOf.
func oracleNames(rec, text string, raw []byte) error {
	st, sr := sha256.Sum256([]byte(text)), sha256.Sum256(raw)
	id := sha256.Sum256(append(append([]byte("token-terminator/artifact/v2\x00"), st[:]...), sr[:]...))
	if !strings.Contains(rec, "a_"+hex.EncodeToString(id[:16])+" ") || !strings.Contains(rec, "chars="+strconv.Itoa(utf8.RuneCountInString(text))+" ") {
		return fmt.Errorf("the receipt names other content")
	}
	return nil
}

// oracleText decodes a tool result: a string, or the texts of a list of
// text parts.
func oracleText(raw []byte) (string, bool) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	var parts []struct {
		Text *string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return "", false
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Text == nil {
			return "", false
		}
		b.WriteString(*p.Text)
	}
	return b.String(), true
}

// oracleLeadWrapper reports whether s is made only of leading wrapper parts.
func oracleLeadWrapper(s string) bool {
	for s != "" {
		t := strings.TrimLeft(s, oracleSpace)
		if strings.HasPrefix(t, oracleReminder[0]) {
			k := strings.Index(t, oracleReminder[1])
			if k < 0 {
				return false
			}
			s = strings.TrimLeft(t[k+len(oracleReminder[1]):], oracleSpace)
			continue
		}
		m := oracleCodexHead.FindStringIndex(s)
		if m == nil {
			return false
		}
		s = s[m[1]:]
	}
	return true
}

// oracleTrailWrapper reports whether s is made only of trailing wrapper parts.
func oracleTrailWrapper(s string) bool {
	for s != "" {
		t := strings.TrimRight(s, oracleSpace)
		if strings.HasSuffix(t, oracleReminder[1]) {
			k := strings.LastIndex(t, oracleReminder[0])
			if k < 0 {
				return false
			}
			s = strings.TrimRight(t[:k], oracleSpace)
			continue
		}
		nl := strings.LastIndexByte(t, '\n') + 1
		if line := t[nl:]; !strings.HasPrefix(line, "(file state is current in your context") || !strings.HasSuffix(line, ")") {
			return false
		}
		s = strings.TrimRight(t[:nl], oracleSpace)
	}
	return true
}

func oracleHasLead(s string) bool {
	t := strings.TrimLeft(s, oracleSpace)
	if strings.HasPrefix(t, oracleReminder[0]) && strings.Contains(t, oracleReminder[1]) {
		return true
	}
	return oracleCodexHead.MatchString(s)
}

func oracleHasTrail(s string) bool {
	t := strings.TrimRight(s, oracleSpace)
	if strings.HasSuffix(t, oracleReminder[1]) && strings.Contains(t, oracleReminder[0]) {
		return true
	}
	line := t[strings.LastIndexByte(t, '\n')+1:]
	return strings.HasPrefix(line, "(file state is current in your context") && strings.HasSuffix(line, ")")
}

// oraclePreamble reports whether a text is client session context: one or
// more blocks of one known tag and nothing else, or AGENTS.md instructions.
func oraclePreamble(s string) bool {
	t := strings.Trim(s, oracleSpace)
	if strings.HasPrefix(t, "# AGENTS.md instructions for ") {
		return true
	}
	for _, tag := range oraclePreambles {
		if !strings.HasPrefix(t, tag[0]) {
			continue
		}
		pieces := strings.Split(t, tag[1])
		if strings.Trim(pieces[len(pieces)-1], oracleSpace) != "" {
			return false
		}
		for _, p := range pieces[:len(pieces)-1] {
			if !strings.HasPrefix(strings.TrimLeft(p, oracleSpace), tag[0]) {
				return false
			}
		}
		return true
	}
	return false
}

// oracleUser reads a history element as a user message: its content parts
// (nil for string content), whether its string content is preamble, and
// which parts are preamble text parts.
func oracleUser(src []byte, m *jsonv.Node) (parts []*jsonv.Node, pre []bool, whole, ok bool) {
	var role string
	if r := m.Get("role"); r == nil || json.Unmarshal(r.Raw(src), &role) != nil || role != "user" {
		return nil, nil, false, false
	}
	c := m.Get("content")
	gemini := false
	if c == nil {
		c, gemini = m.Get("parts"), true // Gemini: parts without a type
	}
	if c == nil {
		return nil, nil, false, false
	}
	var s string
	if json.Unmarshal(c.Raw(src), &s) == nil {
		return nil, nil, oraclePreamble(s), true
	}
	if !c.Is(jsonv.Array) {
		return nil, nil, false, false
	}
	all := len(c.Elems) > 0
	for _, p := range c.Elems {
		var part struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		isPre := json.Unmarshal(p.Raw(src), &part) == nil && (part.Type == "text" || part.Type == "input_text" || (gemini && part.Type == "")) &&
			part.Text != nil && oraclePreamble(*part.Text)
		pre = append(pre, isPre)
		all = all && isPre
	}
	return c.Elems, pre, all, true
}

// oraclePreambleExtract reports whether b is user message a with only its
// session-context parts (all of them, byte for byte), everything else of
// the message unchanged.
func oraclePreambleExtract(as []byte, a *jsonv.Node, bs []byte, b *jsonv.Node) bool {
	parts, pre, whole, ok := oracleUser(as, a)
	if !ok || whole || parts == nil || !b.Is(jsonv.Object) || len(a.Members) != len(b.Members) {
		return false
	}
	for i, m := range a.Members {
		n := b.Members[i]
		if m.Key != n.Key {
			return false
		}
		if m.Key == "content" || m.Key == "parts" {
			if !n.Value.Is(jsonv.Array) {
				return false
			}
			k := 0
			for j, p := range parts {
				if !pre[j] {
					continue
				}
				if k >= len(n.Value.Elems) || !bytes.Equal(p.Raw(as), n.Value.Elems[k].Raw(bs)) {
					return false
				}
				k++
			}
			if k == 0 || k != len(n.Value.Elems) {
				return false
			}
			continue
		}
		if !bytes.Equal(m.Value.Raw(as), n.Value.Raw(bs)) {
			return false
		}
	}
	return true
}

// oraclePreambleKept checks that no session context was folded: a user
// message that is only preamble is kept whole, and one that mixes preamble
// parts with other content is kept whole or as its preamble parts.
func oraclePreambleKept(src []byte, list *jsonv.Node, keep []int) error {
	kept := make(map[int]bool, len(keep))
	for _, k := range keep {
		kept[k] = true
	}
	for i, m := range list.Elems {
		parts, pre, whole, ok := oracleUser(src, m)
		if !ok || kept[i] {
			continue
		}
		if whole {
			return fmt.Errorf("session context element %d was folded", i)
		}
		for j := range parts {
			if pre[j] && !kept[preambleOf(i)] {
				return fmt.Errorf("session context of element %d was folded", i)
			}
		}
	}
	return nil
}
