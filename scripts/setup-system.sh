#!/usr/bin/env bash
# The system packages the checks need (Debian/Ubuntu): installs what is missing when run as root,
# otherwise prints the one `apt-get install` line that would and exits 2.
set -euo pipefail

need=()
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
command -v cc >/dev/null || need+=(gcc)
command -v pkill >/dev/null || need+=(procps)        # the collector's SIGKILL test
command -v script >/dev/null || need+=(bsdutils)     # the terminal status-line test
# The viewer's tests: software Vulkan (kittest snapshots), a real window under Xvfb.
[ -e /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || [ -e /usr/share/vulkan/icd.d/lvp_icd.json ] \
  || need+=(mesa-vulkan-drivers libvulkan1)
command -v Xvfb >/dev/null || need+=(xvfb)
command -v xdpyinfo >/dev/null || need+=(x11-utils)
command -v import >/dev/null || need+=(imagemagick)
for pkg in libgl1-mesa-dri libegl1 libxkbcommon-x11-0 libxcursor1 libxrandr2 libxi6; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# The web build's browser test: headless Chromium driven through chromedriver.
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)

[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
  exit 0
fi
echo "missing system packages; install them with:" >&2
echo "  sudo apt-get install -y --no-install-recommends ${need[*]}" >&2
exit 2
