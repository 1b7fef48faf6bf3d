package compiler_test

import "crypto/sha256"

func sha(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
