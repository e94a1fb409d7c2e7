package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The placeholders bench/anchor_render.py leaves where a value is known only once the VM exists.
const (
	uidPlaceholder        = "@@OWNER_UID@@"
	generationPlaceholder = `"@@GENERATION@@"`
	nowPlaceholder        = "@@NOW@@"
)

// rendered is one VM's share of the Python renderer's output: its children in apply order and the status
// the Python operator derives for a VM whose children were just created.
type rendered struct {
	Children []map[string]any `json:"children"`
	Status   map[string]any   `json:"status"`
}

// loadRendered reads DIR/<name>.json (a few KiB) on every reconcile, standing in for an in-process
// renderer: nothing of it is held between reconciles, so it adds no memory to the anchor.
func loadRendered(dir string, vm *unstructured.Unstructured, now time.Time) (*rendered, error) {
	raw, err := os.ReadFile(filepath.Join(dir, vm.GetName()+".json"))
	if err != nil {
		return nil, err
	}
	raw = bytes.ReplaceAll(raw, []byte(uidPlaceholder), []byte(vm.GetUID()))
	raw = bytes.ReplaceAll(raw, []byte(generationPlaceholder), []byte(strconv.FormatInt(vm.GetGeneration(), 10)))
	raw = bytes.ReplaceAll(raw, []byte(nowPlaceholder), []byte(now.Format("2006-01-02T15:04:05Z")))
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.UseNumber()
	var out rendered
	if err := decoder.Decode(&out); err != nil {
		return nil, fmt.Errorf("%s.json: %w", vm.GetName(), err)
	}
	for i, child := range out.Children {
		out.Children[i] = plainNumbers(child).(map[string]any)
	}
	out.Status = plainNumbers(out.Status).(map[string]any)
	return &out, nil
}

// plainNumbers turns json.Number into int64 (or float64), the types unstructured objects may hold.
func plainNumbers(value any) any {
	switch v := value.(type) {
	case map[string]any:
		for key, item := range v {
			v[key] = plainNumbers(item)
		}
		return v
	case []any:
		for i, item := range v {
			v[i] = plainNumbers(item)
		}
		return v
	case json.Number:
		if whole, err := v.Int64(); err == nil {
			return whole
		}
		f, _ := v.Float64()
		return f
	default:
		return v
	}
}
