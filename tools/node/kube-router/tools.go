//go:build tools

// Package tools pins kube-router (used firewall-only, as the test tier's NetworkPolicy engine).
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
