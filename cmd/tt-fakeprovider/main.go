// Command tt-fakeprovider is a stand-in provider for trying the gateway
// without a provider key: it answers OpenAI Chat Completions and Responses
// and Anthropic Messages (JSON and SSE) with a short message and reports
// usage as the providers do, including a simulated prompt cache.
//
//	go run ./cmd/tt-fakeprovider                  # listens on 127.0.0.1:9099
//	curl -s 127.0.0.1:9099/_fake/last?format=openai_chat   # the last body it received
//
// It listens on loopback only.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/tokenterminator/caddy-token-terminator/internal/fakeprovider"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:9099", "loopback address to listen on")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatal(err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintf(os.Stderr, "tt-fakeprovider: %s is not a loopback address\n", *addr)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	// Go sets TCP_NODELAY on accepted connections by default, so small SSE
	// events are not held back by Nagle's algorithm.
	fmt.Fprintf(os.Stderr, "tt-fakeprovider listening on http://%s\n", ln.Addr())
	srv := &http.Server{Handler: &fakeprovider.Provider{}, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.Serve(ln))
}
