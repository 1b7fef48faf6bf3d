package compiler

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tokenterminator/caddy-token-terminator/internal/artifact"
)

// CheckCompactedKeyed is CheckCompacted for a gateway that names artifacts
// by keyed ids (Request.KeyID), which the oracle cannot compute: a receipt
// must carry a well-formed id whose sha256 field is its prefix, one content
// one id and two contents two ids within the rewrite, and everything else
// CheckCompacted checks. A receipt naming its content identity passes too.
func CheckCompactedKeyed(path string, orig, out []byte) error {
	return check(path, orig, out, true, &oracleIDs{keyed: true})
}

// CheckRewriteKeyed is CheckRewrite with the ids of CheckCompactedKeyed.
func CheckRewriteKeyed(path string, orig, out []byte) error {
	return check(path, orig, out, false, &oracleIDs{keyed: true})
}

// oracleIDs checks the ids of one rewrite's receipts. A nil one is strict:
// every id is its content identity.
type oracleIDs struct {
	keyed     bool
	idOf      map[artifact.Digest]string
	contentOf map[string]artifact.Digest
}

var oracleIDRE = regexp.MustCompile(`^\[Token Terminator artifact a_([0-9a-f]{32}) \|.* \| sha256=([0-9a-f]{16})…\]$`)

func (o *oracleIDs) names(rec, text string, raw []byte) error {
	strict := oracleNames(rec, text, raw)
	if o == nil || !o.keyed || strict == nil {
		return strict
	}
	m := oracleIDRE.FindStringSubmatch(rec)
	if m == nil || m[1][:16] != m[2] {
		return fmt.Errorf("the receipt's id is malformed")
	}
	if !strings.Contains(rec, " chars="+strconv.Itoa(utf8.RuneCountInString(text))+" ") {
		return fmt.Errorf("the receipt's size is not its content's")
	}
	st, sr := sha256.Sum256([]byte(text)), sha256.Sum256(raw)
	d := sha256.Sum256(append(st[:], sr[:]...))
	if o.idOf == nil {
		o.idOf, o.contentOf = map[artifact.Digest]string{}, map[string]artifact.Digest{}
	}
	if prev, ok := o.idOf[d]; ok && prev != m[1] {
		return fmt.Errorf("one content is named by two ids")
	}
	if prev, ok := o.contentOf[m[1]]; ok && prev != d {
		return fmt.Errorf("one id names two contents")
	}
	o.idOf[d], o.contentOf[m[1]] = m[1], d
	return nil
}
