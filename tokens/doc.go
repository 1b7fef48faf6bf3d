// Package tokens counts provider tokens of complete request bodies with
// tiktoken-go, offline (BPE files embedded), for the compiler's token gate.
package tokens

import (
	_ "github.com/pkoukk/tiktoken-go"
	_ "github.com/pkoukk/tiktoken-go-loader"
)
