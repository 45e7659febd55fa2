#!/usr/bin/env bash
# make app-notarize (macOS): send the signed Logitscope.app to Apple's notary service, wait for
# the verdict and staple the ticket to the app, so Gatekeeper accepts it offline. Run
# make app-zip after it: the zip to ship must hold the stapled app. packaging/README.md has the
# variables; either an Apple ID with an app-specific password or an App Store Connect API key:
#
#   APPLE_ID, APPLE_APP_PASSWORD, APPLE_TEAM_ID
#   APPLE_API_KEY (the .p8 file in base64), APPLE_API_KEY_ID, APPLE_API_ISSUER
set -euo pipefail
app=${1:?usage: notarize.sh path/to/Logitscope.app build-folder}
build=${2:-build}

step=app-notarize
here=$(cd "$(dirname "$0")" && pwd)
. "$here/need.sh"
if [ -n "${APPLE_API_KEY:-}" ]; then need APPLE_API_KEY_ID APPLE_API_ISSUER; else need APPLE_ID APPLE_APP_PASSWORD APPLE_TEAM_ID; fi
mkdir -p "$build"
work=$(mktemp -d "$build/notarize.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "${APPLE_API_KEY:-}" ]; then
    printf '%s' "$APPLE_API_KEY" | base64 --decode > "$work/AuthKey.p8"
    credentials=(--key "$work/AuthKey.p8" --key-id "$APPLE_API_KEY_ID" --issuer "$APPLE_API_ISSUER")
else
    credentials=(--apple-id "$APPLE_ID" --password "$APPLE_APP_PASSWORD" --team-id "$APPLE_TEAM_ID")
fi
if ! codesign --verify --strict "$app" 2>/dev/null; then
    echo "app-notarize: $app is not signed; run make app-sign first" >&2
    exit 1
fi

ditto -c -k --keepParent "$app" "$work/submission.zip"
xcrun notarytool submit "$work/submission.zip" "${credentials[@]}" --wait --output-format plist > "$work/result.plist"
status=$(plutil -extract status raw "$work/result.plist")
if [ "$status" != Accepted ]; then
    # The log names each file Apple refused and why.
    xcrun notarytool log "$(plutil -extract id raw "$work/result.plist")" "${credentials[@]}" || true
    echo "app-notarize: the notary service answered $status" >&2
    exit 1
fi
xcrun stapler staple "$app"
xcrun stapler validate "$app"
spctl --assess --type execute --verbose "$app"
