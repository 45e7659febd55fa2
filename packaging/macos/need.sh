# Sourced by sign.sh and notarize.sh after they set $step: `need NAME...` stops with exit
# code 2, naming the first variable that is not set, before anything is done.
need() {
    for name in "$@"; do
        if [ -z "${!name:-}" ]; then
            echo "$step: $name is not set (packaging/README.md, Signing and notarization)" >&2
            exit 2
        fi
    done
}
