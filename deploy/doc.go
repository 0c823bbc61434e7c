// Package deploy holds what ships sluice and its tests: the container
// image (image/), the Helm chart (helm/sluice), the plain manifests
// (kubernetes/) rendered from it, and the examples that point Envoy
// Gateway and Istio at sluice (examples/). It is a module of its own, so
// that Helm and the Kubernetes API types are not dependencies of sluice;
// scripts/test.sh runs its tests. docs/kubernetes.md describes it.
package deploy
