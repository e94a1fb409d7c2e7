//go:build tools

// Package tools pins CoreDNS for the real-node test tier (built with `go build github.com/coredns/coredns`).
package tools

import _ "github.com/coredns/coredns"
