#!/bin/sh
# Install (or remove) Hearth's desktop entry, icons and AppStream metainfo for the current user.
#
#   packaging/install-desktop-entry.sh [--uninstall] [PATH_TO_HEARTH_EXECUTABLE]
#
# Works from a source checkout (packaging/ next to resources/) and from a built bundle
# (dist/Hearth/install-desktop-entry.sh, files under dist/Hearth/_internal/). Without an
# executable argument it uses, in order: the bundle it sits in, the checkout's
# dist/Hearth/hearth, the checkout's .venv/bin/hearth, then `hearth` on PATH.
# Files go to ${XDG_DATA_HOME:-~/.local/share}/{applications,icons/hicolor,metainfo}.
set -eu

APP_ID=io.github.hearth.Hearth
SIZES="16 32 48 64 128 256 512"
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=${XDG_DATA_HOME:-$HOME/.local/share}

if [ -f "$HERE/_internal/resources/icons/hearth.svg" ]; then       # inside dist/Hearth/
    ICONS="$HERE/_internal/resources/icons"; LINUX="$HERE/_internal/linux"; BUNDLE_EXE="$HERE/hearth"
elif [ -f "$HERE/../resources/icons/hearth.svg" ]; then              # source checkout
    ICONS="$HERE/../resources/icons"; LINUX="$HERE/linux"; BUNDLE_EXE="$HERE/../dist/Hearth/hearth"
else
    echo "install-desktop-entry: cannot find Hearth's icons next to $HERE" >&2; exit 1
fi

uninstall=0
if [ "${1:-}" = "--uninstall" ]; then uninstall=1; shift; fi

if [ "$uninstall" = 1 ]; then
    rm -f "$DATA/applications/$APP_ID.desktop" "$DATA/metainfo/$APP_ID.metainfo.xml" \
          "$DATA/icons/hicolor/scalable/apps/$APP_ID.svg"
    for s in $SIZES; do rm -f "$DATA/icons/hicolor/${s}x${s}/apps/$APP_ID.png"; done
    echo "removed Hearth's desktop entry and icons from $DATA"
else
    exe=${1:-}
    if [ -z "$exe" ]; then
        if [ -x "$BUNDLE_EXE" ]; then exe=$BUNDLE_EXE
        elif [ -x "$HERE/../.venv/bin/hearth" ]; then exe="$HERE/../.venv/bin/hearth"
        elif command -v hearth >/dev/null 2>&1; then exe=$(command -v hearth)
        else echo "install-desktop-entry: no hearth executable found; pass its path" >&2; exit 1
        fi
    fi
    [ -x "$exe" ] || { echo "install-desktop-entry: $exe is not executable" >&2; exit 1; }
    exe=$(cd "$(dirname "$exe")" && pwd)/$(basename "$exe")
    case $exe in *[!A-Za-z0-9_./+-]*) quoted="\"$exe\"" ;; *) quoted=$exe ;; esac

    mkdir -p "$DATA/applications" "$DATA/metainfo" "$DATA/icons/hicolor/scalable/apps"
    sed -e "s|^Exec=.*|Exec=$quoted|" -e "s|^TryExec=.*|TryExec=$exe|" \
        "$LINUX/hearth.desktop" > "$DATA/applications/$APP_ID.desktop"
    cp "$LINUX/$APP_ID.metainfo.xml" "$DATA/metainfo/$APP_ID.metainfo.xml"
    cp "$ICONS/hearth.svg" "$DATA/icons/hicolor/scalable/apps/$APP_ID.svg"
    for s in $SIZES; do
        mkdir -p "$DATA/icons/hicolor/${s}x${s}/apps"
        cp "$ICONS/hearth-$s.png" "$DATA/icons/hicolor/${s}x${s}/apps/$APP_ID.png"
    done
    echo "installed $DATA/applications/$APP_ID.desktop (Exec=$exe) and icons"
fi

# Refresh the caches when the tools exist; a missing tool is not an error.
if command -v update-desktop-database >/dev/null 2>&1; then
    update-desktop-database -q "$DATA/applications" || true
fi
if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -f "$DATA/icons/hicolor/index.theme" ]; then
    gtk-update-icon-cache -q -t "$DATA/icons/hicolor" || true
fi
