#!/usr/bin/env bash
# make app-sign (macOS): sign the built Logitscope.app with a Developer ID Application
# certificate and the hardened runtime, as notarization requires. packaging/README.md has the
# variables and how to make them.
#
#   APPLE_SIGNING_IDENTITY      "Developer ID Application: Name (TEAMID)" (required)
#   APPLE_CERTIFICATE_P12       the certificate and its key, .p12 in base64 (CI: imported into a
#   APPLE_CERTIFICATE_PASSWORD  temporary keychain, deleted on exit); unset: the login keychain
set -euo pipefail
app=${1:?usage: sign.sh path/to/Logitscope.app}
here=$(cd "$(dirname "$0")" && pwd)

step=app-sign
. "$here/need.sh"
need APPLE_SIGNING_IDENTITY
if [ -n "${APPLE_CERTIFICATE_P12:-}" ]; then need APPLE_CERTIFICATE_PASSWORD; fi
if [ ! -d "$app" ]; then
    echo "app-sign: no $app; run make app first" >&2
    exit 1
fi

keychain_args=()
if [ -n "${APPLE_CERTIFICATE_P12:-}" ]; then
    # A keychain of its own, so a CI runner's login keychain (locked, with a password nobody
    # knows) never asks; the previous search list comes back on exit.
    work=$(mktemp -d "${RUNNER_TEMP:-${TMPDIR:-/tmp}}/logitscope-sign.XXXXXX")
    keychain="$work/signing.keychain-db"
    password=$(uuidgen)
    previous=$(security list-keychains -d user | tr -d '"')
    cleanup() {
        # shellcheck disable=SC2086 # the list is one path per word
        security list-keychains -d user -s $previous || true
        security delete-keychain "$keychain" || true
        rm -rf "$work"
    }
    trap cleanup EXIT
    printf '%s' "$APPLE_CERTIFICATE_P12" | base64 --decode > "$work/certificate.p12"
    security create-keychain -p "$password" "$keychain"
    security set-keychain-settings -lut 3600 "$keychain"
    security unlock-keychain -p "$password" "$keychain"
    security import "$work/certificate.p12" -k "$keychain" -P "$APPLE_CERTIFICATE_PASSWORD" -T /usr/bin/codesign
    rm -f "$work/certificate.p12"
    # Lets codesign use the key without a dialog.
    security set-key-partition-list -S apple-tool:,apple:,codesign: -s -k "$password" "$keychain" >/dev/null
    # shellcheck disable=SC2086
    security list-keychains -d user -s "$keychain" $previous
    keychain_args=(--keychain "$keychain")
fi

sign() {
    codesign --force --timestamp --options runtime ${keychain_args[@]+"${keychain_args[@]}"} \
        --sign "$APPLE_SIGNING_IDENTITY" "$@"
}

# Inside out: every Mach-O file (Python extensions, dylibs, Qt's frameworks' binaries), then
# each framework, then the app with its entitlements. codesign --deep would give every nested
# binary the app's entitlements and skips loose .so files outside the standard places.
main="$app/Contents/MacOS/$(basename "$app" .app)"
find "$app/Contents" -type f ! -path "$main" -print0 | while IFS= read -r -d '' file; do
    if file -b "$file" | grep -q 'Mach-O'; then sign "$file"; fi
done
find "$app/Contents" -depth -type d -name '*.framework' -print0 | while IFS= read -r -d '' framework; do
    sign "$framework"
done
sign --entitlements "$here/entitlements.plist" "$app"
codesign --verify --deep --strict --verbose=2 "$app"
codesign --display --entitlements - "$app"
