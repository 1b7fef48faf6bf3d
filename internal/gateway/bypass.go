package gateway

import (
	"net/http"
	"strings"
)

// bypassValue is the value of the bypass header that asks for no compile.
const bypassValue = "bypass"

// bypassed reports whether the client asked for its request to go
// upstream untouched, and removes the header: it is the gateway's, not the
// provider's. Other values of the header are removed too, and ignored.
func (g *Gateway) bypassed(r *http.Request) bool {
	name := g.BypassHeader
	v, ok := r.Header[http.CanonicalHeaderKey(name)]
	if !ok {
		return false
	}
	r.Header.Del(name)
	return len(v) > 0 && strings.EqualFold(strings.TrimSpace(v[0]), bypassValue)
}
