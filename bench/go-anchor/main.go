// Command go-anchor is a benchmark tool, not part of the product: a minimal controller-runtime operator
// that does the UDSVirtualMachine controller's job, so bench/fleet_anchor.py can measure the Python
// operator against a Go one on the same work (issue 19, ADR 0010).
//
// It watches UDSVirtualMachines in one namespace, server-side applies the children the Python renderer
// produced for each VM (read from --rendered DIR, see rendered.go), writes the same status and the same
// transition Event, with controller-runtime's default informer caches and MaxConcurrentReconciles equal
// to the Python operator's --max-workers.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	os.Exit(run())
}

func run() int {
	// Our own flag set: controller-runtime registers a global --kubeconfig flag of its own.
	flags := flag.NewFlagSet("go-anchor", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig file (required)")
	namespace := flags.String("namespace", "", "the one namespace to watch (required)")
	rendered := flags.String("rendered", "", "directory of <name>.json files written by bench/anchor_render.py (required)")
	workers := flags.Int("max-workers", 8, "concurrent reconciles (the Python operator's --max-workers default)")
	bindAddress := flags.String("bind-address", "127.0.0.1", "address of the metrics server")
	metricsPort := flags.Int("metrics-port", 0, "metrics port (0: metrics off)")
	qps := flags.Float64("qps", -1, "client-side rate limit (negative: none, like the Python operator)")
	verbosity := flags.Int("v", 0, "log verbosity")
	if err := flags.Parse(os.Args[1:]); err != nil {
		return 2
	}
	if *kubeconfig == "" || *namespace == "" || *rendered == "" {
		fmt.Fprintln(os.Stderr, "error: --kubeconfig, --namespace and --rendered are required")
		return 2
	}
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) },
		funcr.Options{Verbosity: *verbosity})
	ctrl.SetLogger(log)

	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: cannot load %s: %v\n", *kubeconfig, err)
		return 1
	}
	cfg.QPS = float32(*qps)
	cfg.Burst = 0
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		fmt.Fprintf(os.Stderr, "error: scheme: %v\n", err)
		return 1
	}
	metricsAddress := "0"
	if *metricsPort != 0 {
		metricsAddress = net.JoinHostPort(*bindAddress, strconv.Itoa(*metricsPort))
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}},
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: true}},
		Metrics:                metricsserver.Options{BindAddress: metricsAddress},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: manager: %v\n", err)
		return 1
	}
	host, _ := os.Hostname()
	reconciler := &anchor{Client: mgr.GetClient(), rendered: *rendered, instance: truncate(host, 128), expected: newExpectations()}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("udsvirtualmachine").
		For(newUnstructured(vmGVK)).
		Owns(&corev1.Secret{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(newUnstructured(dataVolumeGVK)).
		Owns(newUnstructured(virtualMachineGVK)).
		WithOptions(controller.Options{MaxConcurrentReconciles: *workers}).
		Complete(reconciler)
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: controller: %v\n", err)
		return 1
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

func newUnstructured(gvk groupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

func truncate(text string, limit int) string {
	if len(text) > limit {
		return text[:limit]
	}
	return text
}
