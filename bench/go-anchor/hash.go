package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// appliedHashAnnotation is the Python operator's drift annotation (controller/compare.py).
const appliedHashAnnotation = "uds.dev/applied-hash"

// stampAppliedHash sets the annotation the Python operator sets: the first 16 hex digits of the SHA-256 of
// the manifest's canonical JSON, taken with an (possibly empty) annotations map and without the hash
// itself. The children must be byte-for-byte the Python operator's, so the canonical form is Python's
// json.dumps(sort_keys=True, separators=(",", ":")) with its default ensure_ascii.
func stampAppliedHash(manifest map[string]any) (string, error) {
	meta, ok := manifest["metadata"].(map[string]any)
	if !ok {
		return "", fmt.Errorf("a rendered child has no metadata")
	}
	annotations, ok := meta["annotations"].(map[string]any)
	if !ok {
		annotations = map[string]any{}
		meta["annotations"] = annotations
	}
	delete(annotations, appliedHashAnnotation)
	var text strings.Builder
	if err := writeCanonical(&text, manifest); err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(text.String()))
	hash := hex.EncodeToString(sum[:])[:16]
	annotations[appliedHashAnnotation] = hash
	return hash, nil
}

func writeCanonical(out *strings.Builder, value any) error {
	switch v := value.(type) {
	case nil:
		out.WriteString("null")
	case bool:
		out.WriteString(strconv.FormatBool(v))
	case int64:
		out.WriteString(strconv.FormatInt(v, 10))
	case float64:
		out.WriteString(pythonFloat(v))
	case string:
		writePythonString(out, v)
	case []any:
		out.WriteByte('[')
		for i, item := range v {
			if i > 0 {
				out.WriteByte(',')
			}
			if err := writeCanonical(out, item); err != nil {
				return err
			}
		}
		out.WriteByte(']')
	case map[string]any:
		keys := make([]string, 0, len(v))
		for key := range v {
			keys = append(keys, key)
		}
		sort.Strings(keys) // byte order of UTF-8 is code-point order, as Python sorts
		out.WriteByte('{')
		for i, key := range keys {
			if i > 0 {
				out.WriteByte(',')
			}
			writePythonString(out, key)
			out.WriteByte(':')
			if err := writeCanonical(out, v[key]); err != nil {
				return err
			}
		}
		out.WriteByte('}')
	default:
		return fmt.Errorf("cannot hash a %T", value)
	}
	return nil
}

// writePythonString escapes like Python's json with ensure_ascii: everything outside ' '..'~' escaped.
func writePythonString(out *strings.Builder, text string) {
	out.WriteByte('"')
	for _, r := range text {
		switch {
		case r == '"':
			out.WriteString(`\"`)
		case r == '\\':
			out.WriteString(`\\`)
		case r == '\n':
			out.WriteString(`\n`)
		case r == '\r':
			out.WriteString(`\r`)
		case r == '\t':
			out.WriteString(`\t`)
		case r == '\b':
			out.WriteString(`\b`)
		case r == '\f':
			out.WriteString(`\f`)
		case r >= ' ' && r <= '~':
			out.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		case r == utf8.RuneError:
			out.WriteString(`\ufffd`)
		default:
			fmt.Fprintf(out, `\u%04x`, r)
		}
	}
	out.WriteByte('"')
}

// pythonFloat formats like Python's float repr (shortest round-trip, "1.0" for whole numbers).
func pythonFloat(f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return map[bool]string{true: "Infinity", false: "-Infinity"}[f > 0]
	}
	text := strconv.FormatFloat(f, 'g', -1, 64)
	if f == math.Trunc(f) && math.Abs(f) < 1e16 && !strings.ContainsAny(text, ".e") {
		text += ".0"
	}
	return text
}
