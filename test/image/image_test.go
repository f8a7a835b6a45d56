package image_test

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/teardown-dev/teardown-operator/test/framework"
)

const (
	tarballPath = "bin/image/teardown-operator.tar"
	layoutPath  = "bin/image/oci"
)

// releaseTag is the tag make image gives the image: the Helm chart's appVersion, which is the
// chart's default image tag, so that the image built is the image the chart pulls.
func releaseTag(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(repoPath(t, "charts/teardown-operator/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: *"?([^"\n]+)"?$`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return "ghcr.io/teardown-dev/teardown-operator:" + string(m[1])
}

// binaries are the image's executables, by name in /.
var binaries = []string{"kubectl-teardown", "teardown-operator"}

// wantFiles is the whole file system of the image: entry name to tar type.
var wantFiles = map[string]byte{
	"etc":               tar.TypeDir,
	"etc/group":         tar.TypeReg,
	"etc/passwd":        tar.TypeReg,
	"kubectl-teardown":  tar.TypeReg,
	"teardown-operator": tar.TypeReg,
}

// repoPath is p under the repository root, failing the test with what to do when it is missing.
func repoPath(t *testing.T, p string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
	full := filepath.Join(dir, p)
	if _, err := os.Stat(full); err != nil {
		t.Fatalf("%s is missing: run `make image` first (make test-image does): %v", p, err)
	}
	return full
}

// tarballImage is the image of the docker tarball.
func tarballImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := tarball.ImageFromPath(repoPath(t, tarballPath), nil)
	if err != nil {
		t.Fatalf("reading %s: %v", tarballPath, err)
	}
	return img
}

// layoutImages are the images of the OCI layout's index, by platform ("linux/amd64"). index.json
// names one index, tagged, that lists the platforms' images.
func layoutImages(t *testing.T) map[string]v1.Image {
	t.Helper()
	top, err := layout.ImageIndexFromPath(repoPath(t, layoutPath))
	if err != nil {
		t.Fatalf("reading %s: %v", layoutPath, err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || !im.Manifests[0].MediaType.IsIndex() {
		t.Fatalf("%s/index.json should name one image index, names %+v", layoutPath, im.Manifests)
	}
	if got := im.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got == "" {
		t.Errorf("the index in %s/index.json has no org.opencontainers.image.ref.name", layoutPath)
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if im, err = idx.IndexManifest(); err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		if images[d.Platform.String()], err = idx.Image(d.Digest); err != nil {
			t.Fatal(err)
		}
	}
	return images
}

func TestTarballConfig(t *testing.T) {
	img := tarballImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	checkConfig(t, cf, "amd64")
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(repoPath(t, tarballPath)) })
	if err != nil {
		t.Fatal(err)
	}
	if tag := releaseTag(t); len(m) != 1 || !slices.Contains(m[0].RepoTags, tag) {
		t.Errorf("tarball manifest = %+v, want one image tagged %s", m, tag)
	}
}

// checkConfig checks the image config of one platform.
func checkConfig(t *testing.T, cf *v1.ConfigFile, arch string) {
	t.Helper()
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("platform = %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/teardown-operator"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q, cmd %q; want [/teardown-operator] and no cmd", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" || c.WorkingDir != "/" {
		t.Errorf("user %q, working dir %q; want 65532:65532 and /", c.User, c.WorkingDir)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.source": "https://github.com/teardown-dev/teardown-operator",
		"org.opencontainers.image.title":  "teardown-operator",
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"org.opencontainers.image.description", "org.opencontainers.image.version"} {
		if c.Labels[k] == "" {
			t.Errorf("label %s is missing", k)
		}
	}
}

func TestIndexPlatforms(t *testing.T) {
	images := layoutImages(t)
	got := slices.Sorted(maps.Keys(images))
	if want := []string{"linux/amd64", "linux/arm64"}; !slices.Equal(got, want) {
		t.Fatalf("index platforms = %q, want %q", got, want)
	}
	for p, img := range images {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		checkConfig(t, cf, strings.TrimPrefix(p, "linux/"))
	}
	// The tarball holds the same linux/amd64 image: the same config, so the same image ID.
	want, err := images["linux/amd64"].ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := tarballImage(t).ConfigName(); err != nil || got != want {
		t.Errorf("tarball image ID = %s (%v), want the index's linux/amd64 image ID %s", got, err, want)
	}
}

// fsEntry is one entry of an image's flattened file system.
type fsEntry struct {
	hdr  *tar.Header
	data []byte
}

// fileSystem reads the flattened file system of img, by entry name without a leading / or ./.
func fileSystem(t *testing.T, img v1.Image) map[string]fsEntry {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	fs := map[string]fsEntry{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return fs
		}
		if err != nil {
			t.Fatalf("reading the file system: %v", err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("reading %s: %v", h.Name, err)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/"), "/")
		fs[name] = fsEntry{hdr: h, data: data}
	}
}

func TestFileSystem(t *testing.T) {
	images := layoutImages(t)
	images["tarball linux/amd64"] = tarballImage(t)
	for p, img := range images {
		t.Run(p, func(t *testing.T) {
			fs := fileSystem(t, img)
			checkFiles(t, fs)
			for _, b := range binaries {
				if e, ok := fs[b]; ok {
					checkStaticELF(t, b, e.data, strings.TrimPrefix(p, "tarball "))
				}
			}
		})
	}
}

// checkFiles checks that fs holds exactly the expected entries, none of them a shell, owned by
// root, the binaries executable, and passwd and group naming nonroot.
func checkFiles(t *testing.T, fs map[string]fsEntry) {
	t.Helper()
	for name, e := range fs {
		switch base := filepath.Base(name); {
		case slices.Contains([]string{"sh", "bash", "ash", "dash", "zsh", "busybox"}, base):
			t.Errorf("the image has a shell: /%s", name)
		case wantFiles[name] != e.hdr.Typeflag:
			t.Errorf("unexpected entry /%s (type %q)", name, e.hdr.Typeflag)
		case e.hdr.Uid != 0 || e.hdr.Gid != 0:
			t.Errorf("/%s is owned by %d:%d, want 0:0", name, e.hdr.Uid, e.hdr.Gid)
		}
	}
	for name := range wantFiles {
		if _, ok := fs[name]; !ok {
			t.Errorf("/%s is missing", name)
		}
	}
	for _, b := range binaries {
		if m := fs[b].hdr; m != nil && m.FileInfo().Mode().Perm() != 0o755 {
			t.Errorf("/%s has mode %v, want 0755", b, m.FileInfo().Mode().Perm())
		}
	}
	if p := string(fs["etc/passwd"].data); !strings.Contains(p, "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd has no nonroot user 65532:\n%s", p)
	}
	if g := string(fs["etc/group"].data); !strings.Contains(g, "\nnonroot:x:65532:") {
		t.Errorf("/etc/group has no nonroot group 65532:\n%s", g)
	}
}

// checkStaticELF checks that the binary is an ELF executable of the platform with no program
// interpreter (PT_INTERP) and no shared libraries, so that it runs on an empty base, and stripped.
func checkStaticELF(t *testing.T, name string, data []byte, platform string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Errorf("/%s is not ELF: %v", name, err)
		return
	}
	defer f.Close()
	machine := map[string]elf.Machine{"linux/amd64": elf.EM_X86_64, "linux/arm64": elf.EM_AARCH64}[platform]
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("/%s is %v %v, want %v %v", name, f.Machine, f.Type, machine, elf.ET_EXEC)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("/%s is dynamically linked: it has a %v program header", name, p.Type)
		}
	}
	for _, s := range []string{".symtab", ".debug_info"} {
		if f.Section(s) != nil {
			t.Errorf("/%s has a %s section: it was not built with -ldflags \"-s -w\"", name, s)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("/%s needs shared libraries %q (%v)", name, libs, err)
	}
}

// extract writes the tarball image's /NAME into a temporary directory and returns its path.
func extract(t *testing.T, name string) string {
	t.Helper()
	p, err := framework.ImageBinary(repoPath(t, tarballPath), name, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBinariesRun(t *testing.T) {
	for _, c := range []struct{ name, want string }{
		{"teardown-operator", "-run-namespace"},
		{"kubectl-teardown", "drain"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := exec.Command(extract(t, c.name), "--help").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --help: %v\n%s", c.name, err, out)
			}
			if !strings.Contains(string(out), c.want) {
				t.Errorf("%s --help does not mention %q:\n%s", c.name, c.want, out)
			}
		})
	}
}

// TestPluginVersion: the plugin in the image says the image's version, the chart's appVersion it
// is tagged with. Issue: it said "dev".
func TestPluginVersion(t *testing.T) {
	out, err := exec.Command(extract(t, "kubectl-teardown"), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl-teardown version: %v\n%s", err, out)
	}
	_, version, _ := strings.Cut(releaseTag(t), ":")
	if want := "kubectl-teardown " + version + "\n"; string(out) != want {
		t.Errorf("kubectl-teardown version printed %q, want %q", out, want)
	}
}

// TestFallbackRoots checks what `go version -m BINARY` prints, read with debug/buildinfo as that
// command does: each binary links golang.org/x/crypto/x509roots/fallback, so https finds CA roots
// on the empty base, which has no CA bundle; and it was built static and trimmed (-trimpath
// leaves -ldflags out of the build info: checkStaticELF checks -s -w).
func TestFallbackRoots(t *testing.T) {
	for _, b := range binaries {
		t.Run(b, func(t *testing.T) {
			info, err := buildinfo.ReadFile(extract(t, b))
			if err != nil {
				t.Fatalf("reading the build info of /%s: %v", b, err)
			}
			if !slices.ContainsFunc(info.Deps, func(m *debug.Module) bool { return m.Path == "golang.org/x/crypto/x509roots/fallback" }) {
				t.Errorf("/%s does not link golang.org/x/crypto/x509roots/fallback", b)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			for k, want := range map[string]string{"CGO_ENABLED": "0", "-trimpath": "true", "GOOS": "linux", "GOARCH": "amd64"} {
				if settings[k] != want {
					t.Errorf("/%s was built with %s=%q, want %q", b, k, settings[k], want)
				}
			}
		})
	}
}

// TestNoFaultInjection: the shipped operator carries none of the fault suite's injection
// (internal/faultinject is compiled in only with the build tag faultinject). The binary is
// stripped, but its function table still names every function it holds.
func TestNoFaultInjection(t *testing.T) {
	data, err := os.ReadFile(extract(t, "teardown-operator"))
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.Index(data, []byte("internal/faultinject.")); i >= 0 {
		t.Errorf("the image's operator holds %q: it was built with the faultinject tag", data[i:min(len(data), i+60)])
	}
}
