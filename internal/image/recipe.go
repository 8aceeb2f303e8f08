package image

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"

	"github.com/cove-sandbox/cove/internal/agentproto"
	"github.com/cove-sandbox/cove/internal/netns"
)

// recipeVersion is bumped whenever the base build changes in a way the
// recipe fields below do not capture (e.g. how a phase runs), so that old
// cached bases are not reused.
const recipeVersion = 1

// Suite is the Debian release of the guest.
const Suite = "bookworm"

// AgentPath is where the cove-agent binary lives inside every image.
const AgentPath = "/usr/local/bin/cove-agent"

// recipe is everything that determines the base rootfs. Its JSON encoding is
// hashed into the base key, so any change here yields a new base.
type recipe struct {
	Version  int               `json:"version"`
	Suite    string            `json:"suite"`
	Variant  string            `json:"variant"`
	Include  []string          `json:"include"`  // debootstrap --include (phase 1)
	Packages []string          `json:"packages"` // apt-get install in the chroot (phase 2)
	DpkgCfg  string            `json:"dpkg_cfg"` // slimming rules, written before phase 2
	Files    map[string]string `json:"files"`    // guest path -> content, written after phase 2
	Dirs     []guestDir        `json:"dirs"`     // mountpoints the runtime needs
}

type guestDir struct {
	Path string      `json:"path"`
	Mode fs.FileMode `json:"mode"`
}

// dpkgCfgPath is the dpkg config fragment that keeps docs, man pages and
// translations out of the image (65-100 MB). Copyright files stay: they are
// small and the licences require them.
const dpkgCfgPath = "/etc/dpkg/dpkg.cfg.d/01-cove-slim"

const dpkgSlim = `# cove: keep the guest image small.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
`

func defaultRecipe() recipe {
	return recipe{
		Version: recipeVersion,
		Suite:   Suite,
		Variant: "minbase",
		// npm cannot go here: debootstrap does not resolve virtual
		// packages, hence the second phase.
		Include: []string{"ca-certificates"},
		Packages: []string{
			"python3", "python3-pip", "python3-venv",
			"nodejs", "npm",
			"git", "curl", "procps", "iproute2", "sudo",
		},
		DpkgCfg: dpkgSlim,
		Files: map[string]string{
			// PEP 668 would otherwise refuse `pip install` outside a venv;
			// the sandbox is disposable, so system-wide installs are fine.
			"/etc/pip.conf": "[global]\nbreak-system-packages = true\n",
			// debootstrap copies the host's files; the guest must not
			// inherit them. Images replace this one (layerFiles); it
			// stays so that the base keeps its key.
			"/etc/resolv.conf": "# cove: sandboxes have no DNS resolver.\n",
			"/etc/hostname":    "sandbox\n",
			"/etc/hosts": "127.0.0.1\tlocalhost\n127.0.1.1\tsandbox\n" +
				"::1\tlocalhost ip6-localhost ip6-loopback\n" +
				"ff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n",
			// Empty, not absent: every sandbox must not share one ID.
			"/etc/machine-id": "",
		},
		// runsc mkdirs missing mount destinations in the host copy even
		// with an overlay, which would write into a shared image.
		Dirs: []guestDir{
			{agentproto.WorkDir, 0o755},
			{"/proc", 0o555},
			{"/sys", 0o555},
			{"/dev", 0o755},
			{"/dev/pts", 0o755},
			{"/dev/shm", fs.ModeSticky | 0o777},
			{"/tmp", fs.ModeSticky | 0o777},
			{"/run", 0o755},
			{"/.cove", 0o755},
		},
	}
}

// key is the content address of the base built from r.
func (r recipe) key() string {
	b, err := json.Marshal(r) // map keys are sorted: deterministic
	if err != nil {
		panic("image: marshal recipe: " + err.Error()) // plain data; cannot fail
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// layerFiles are written over the base in every image (guest path ->
// content), each as a new inode. They change without a new debootstrap:
// the recipe's files are the base's, and changing those rebuilds it.
func layerFiles() map[string]string {
	return map[string]string{
		// The daemon's resolver for the sandbox answers at the guest's
		// gateway (internal/netpolicy).
		"/etc/resolv.conf": "nameserver " + netns.HostIP + "\n",
	}
}

// imageKey is the content address of an image: its base plus the agent,
// the layer's files, and the VM init, which its VM artifacts (made on
// demand, never remade) depend on.
func imageKey(baseKey string, agent []byte) string {
	layer, err := json.Marshal(layerFiles()) // map keys are sorted: deterministic
	if err != nil {
		panic("image: marshal layer: " + err.Error()) // plain data; cannot fail
	}
	h := sha256.New()
	h.Write([]byte("cove-image\x00" + baseKey + "\x00" + vmInitVersion + "\x00"))
	h.Write(layer)
	h.Write([]byte{0})
	h.Write(userLayerKey())
	h.Write([]byte{0})
	h.Write(agent)
	return hex.EncodeToString(h.Sum(nil))
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
