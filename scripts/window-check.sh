#!/usr/bin/env bash
# A real window: starts the desktop app on its embedded example under Xvfb, takes a screenshot
# of the screen, and checks that something was drawn (not a blank or single-colour screen).
# Usage: scripts/window-check.sh [path/to/tidemark]   (default: target/debug/tidemark)
# Needs: Xvfb, ImageMagick (import, convert), mesa (software OpenGL/Vulkan).
set -euo pipefail
cd "$(dirname "$0")/.."
app="${1:-target/debug/tidemark}"
out=test-output
mkdir -p "$out"
shot="$out/window.png"
rm -f "$shot"

runtime=$(mktemp -d)
chmod 700 "$runtime"
# Xvfb picks a free display itself and writes its number once it accepts connections
# (a fixed or random number can be taken by another X server on a shared machine).
displayfile="$runtime/display"
Xvfb -displayfd 3 -screen 0 1280x800x24 -nolisten tcp 3>"$displayfile" >"$out/xvfb.log" 2>&1 &
xvfb=$!
app_pid=
cleanup() {
  [ -n "$app_pid" ] && kill "$app_pid" 2>/dev/null || true
  kill "$xvfb" 2>/dev/null || true
  rm -rf "$runtime"
}
trap cleanup EXIT

xvfb_failed() { cat "$out/xvfb.log"; echo "Xvfb $1"; exit 1; }
for _ in $(seq 300); do
  [ -s "$displayfile" ] && break
  kill -0 "$xvfb" 2>/dev/null || xvfb_failed "exited before it opened a display"
  sleep 0.1
done
[ -s "$displayfile" ] || xvfb_failed "opened no display in 30 s"
display=:$(tr -dc 0-9 <"$displayfile")
DISPLAY=$display xdpyinfo >/dev/null 2>&1 || xvfb_failed "display $display refuses connections"
echo "Xvfb on display $display"

# Software rendering: wgpu picks lavapipe (Vulkan) or llvmpipe (GL) from mesa.
DISPLAY=$display XDG_RUNTIME_DIR=$runtime WAYLAND_DISPLAY= "$app" >"$out/window-app.log" 2>&1 &
app_pid=$!

# Wait until the window is mapped, then give it a few frames (software rendering is slow).
for _ in $(seq 100); do
  DISPLAY=$display xwininfo -root -tree 2>/dev/null | grep -q '"tidemark"' && break
  kill -0 "$app_pid" 2>/dev/null || { cat "$out/window-app.log"; echo "the app exited"; exit 1; }
  sleep 0.2
done
sleep 6
kill -0 "$app_pid" 2>/dev/null || { cat "$out/window-app.log"; echo "the app exited"; exit 1; }
DISPLAY=$display import -window root "$shot"

colours=$(convert "$shot" -format %k info:)
echo "window screenshot: $shot, $colours distinct colours"
if [ "$colours" -lt 50 ]; then
  cat "$out/window-app.log"
  echo "the screenshot is blank (only $colours colours)"
  exit 1
fi
