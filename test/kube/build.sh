#!/bin/sh
# Builds kube-apiserver and etcd for the Kubernetes tests (test/kube) into a
# cache directory, unless they are already there, and prints the directory.
# The binaries come from the Go modules pinned in test/kube/build/go.mod, so
# no container runtime or downloaded release is needed. A first build takes
# several minutes (kube-apiserver is large); later runs return at once.
set -eu

dir=${KVXDS_KUBE_BIN:-$HOME/.cache/kvxds/kube-v1.37.2}
src=$(cd "$(dirname "$0")/build" && pwd)
go=${GO:-go}

mkdir -p "$dir"
cd "$src"
# Build into a temporary name and rename, so an interrupted build never
# leaves a truncated binary that a later run would take as done.
if [ ! -x "$dir/etcd" ]; then
	echo "building etcd into $dir" >&2
	"$go" build -o "$dir/etcd.tmp" ./etcd
	mv "$dir/etcd.tmp" "$dir/etcd"
fi
if [ ! -x "$dir/kube-apiserver" ]; then
	echo "building kube-apiserver into $dir (several minutes)" >&2
	"$go" build -o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
	mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
fi
echo "$dir"
