package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type groupVersionKind = schema.GroupVersionKind

const (
	// The Python operator's field manager, so both leave the same managedFields on the same children.
	fieldManager        = "uds-vm-operator"
	reconcilerName      = "go-anchor"
	reportingController = "uds.dev/uds-vm-operator"
	noteLimit           = 1024
)

var (
	vmGVK             = schema.GroupVersionKind{Group: "uds.dev", Version: "v1alpha1", Kind: "UDSVirtualMachine"}
	dataVolumeGVK     = schema.GroupVersionKind{Group: "cdi.kubevirt.io", Version: "v1beta1", Kind: "DataVolume"}
	virtualMachineGVK = schema.GroupVersionKind{Group: "kubevirt.io", Version: "v1", Kind: "VirtualMachine"}
	eventGVK          = schema.GroupVersionKind{Group: "events.k8s.io", Version: "v1", Kind: "Event"}
	strict            = client.FieldValidation("Strict")
)

// anchor is the reconciler: read the VM from the cache, apply each rendered child whose applied hash
// the cache does not already show, then write status (and the transition Event) if the cache's status
// is not for this generation yet.
type anchor struct {
	client.Client
	rendered string
	instance string
	expected *expectations
}

func (a *anchor) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	vm := newUnstructured(vmGVK)
	if err := a.Get(ctx, req.NamespacedName, vm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if vm.GetDeletionTimestamp() != nil {
		return ctrl.Result{}, nil
	}
	want, err := loadRendered(a.rendered, vm, time.Now().UTC())
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "no rendered children for this VM; not retried")
		return ctrl.Result{}, nil
	}
	for _, child := range want.Children {
		if err := a.ensureChild(ctx, child); err != nil {
			return ctrl.Result{}, err
		}
	}
	return ctrl.Result{}, a.publish(ctx, vm, want.Status)
}

// ensureChild stamps the applied-hash annotation (as the Python operator does) and applies the child
// unless the cached copy already carries that hash: zero writes on a resync of unchanged children.
func (a *anchor) ensureChild(ctx context.Context, child map[string]any) error {
	hash, err := stampAppliedHash(child)
	if err != nil {
		return err
	}
	desired := &unstructured.Unstructured{Object: child}
	current, err := a.cachedAnnotation(ctx, desired)
	if err != nil {
		return err
	}
	key := desired.GroupVersionKind().Kind + "/" + desired.GetNamespace() + "/" + desired.GetName()
	lagging := a.expected.stale(key, current, hash)
	if current == hash || lagging {
		return nil
	}
	if err := a.Patch(ctx, desired, client.Apply, client.FieldOwner(fieldManager), client.ForceOwnership, strict); err != nil {
		return err
	}
	a.expected.written(key, hash)
	return nil
}

// cachedAnnotation reads the child from the informer cache (typed for core kinds, unstructured for the
// CRDs) and returns its applied hash, "" when it is not cached.
func (a *anchor) cachedAnnotation(ctx context.Context, desired *unstructured.Unstructured) (string, error) {
	key := types.NamespacedName{Namespace: desired.GetNamespace(), Name: desired.GetName()}
	var obj client.Object
	switch desired.GroupVersionKind() {
	case corev1.SchemeGroupVersion.WithKind("Secret"):
		obj = &corev1.Secret{}
	case networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"):
		obj = &networkingv1.NetworkPolicy{}
	default:
		obj = newUnstructured(desired.GroupVersionKind())
	}
	if err := a.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		return "", err
	}
	return obj.GetAnnotations()[appliedHashAnnotation], nil
}

// publish writes the rendered status with a JSON merge patch on the status subresource, and one Event on
// the first phase, exactly as the Python operator does for a new VM.
func (a *anchor) publish(ctx context.Context, vm *unstructured.Unstructured, status map[string]any) error {
	previousPhase, _, _ := unstructured.NestedString(vm.Object, "status", "phase")
	observed, found, _ := unstructured.NestedInt64(vm.Object, "status", "observedGeneration")
	generation := strconv.FormatInt(vm.GetGeneration(), 10)
	cached := ""
	if found && previousPhase == status["phase"] {
		cached = strconv.FormatInt(observed, 10)
	}
	key := "status/" + string(vm.GetUID())
	lagging := a.expected.stale(key, cached, generation)
	if cached == generation || lagging {
		return nil
	}
	status["reconciledBy"] = reconcilerName
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	options := &client.SubResourcePatchOptions{PatchOptions: client.PatchOptions{
		FieldManager: fieldManager, Raw: &metav1.PatchOptions{FieldValidation: "Strict"},
	}}
	if err := a.Status().Patch(ctx, vm, client.RawPatch(types.MergePatchType, body), options); err != nil {
		return err
	}
	a.expected.written(key, generation)
	if previousPhase == "" {
		phase, _ := status["phase"].(string)
		message, _ := status["message"].(string)
		if message == "" {
			message = phase
		}
		if err := a.Create(ctx, a.event(vm, phase, message), client.FieldOwner(fieldManager), strict); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "event not recorded")
		}
	}
	return nil
}

// event builds the same events.k8s.io/v1 Event as the Python operator's build_event.
func (a *anchor) event(vm *unstructured.Unstructured, reason, note string) *unstructured.Unstructured {
	eventTime := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s/%s/%s", vm.GetUID(), reason, eventTime)))
	if len(note) > noteLimit {
		note = note[:noteLimit]
	}
	event := newUnstructured(eventGVK)
	event.Object["metadata"] = map[string]any{
		"name":      fmt.Sprintf("%s.%s", vm.GetName(), hex.EncodeToString(sum[:])[:12]),
		"namespace": vm.GetNamespace(),
	}
	event.Object["eventTime"] = eventTime
	event.Object["type"] = "Normal"
	event.Object["reason"] = reason
	event.Object["action"] = "Reconcile"
	event.Object["note"] = note
	event.Object["reportingController"] = reportingController
	event.Object["reportingInstance"] = a.instance
	event.Object["regarding"] = map[string]any{
		"apiVersion": vm.GetAPIVersion(),
		"kind":       vm.GetKind(),
		"name":       vm.GetName(),
		"namespace":  vm.GetNamespace(),
		"uid":        string(vm.GetUID()),
	}
	return event
}
