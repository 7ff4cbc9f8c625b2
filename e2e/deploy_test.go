package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leadintake/leadintake/callers"
)

// There is no container engine where the tests run: these tests read the
// Dockerfile and docker-compose.yml and hold them to what the binaries
// accept, so that neither drifts from the code.

// composeFile is the part of a Compose file the test reads.
type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image           string           `yaml:"image"`
	Build           *composeBuild    `yaml:"build"`
	Command         composeCommand   `yaml:"command"`
	Entrypoint      composeCommand   `yaml:"entrypoint"`
	Environment     composeEnv       `yaml:"environment"`
	DependsOn       composeDependsOn `yaml:"depends_on"`
	Ports           []string         `yaml:"ports"`
	Volumes         []string         `yaml:"volumes"`
	StopGracePeriod string           `yaml:"stop_grace_period"`
	Profiles        []string         `yaml:"profiles"`
	Healthcheck     *struct {
		Test composeCommand `yaml:"test"`
	} `yaml:"healthcheck"`
}

// composeBuild is `build: DIR` or `build: {context, dockerfile, target}`.
type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
	Target     string `yaml:"target"`
}

func (b *composeBuild) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		b.Context = n.Value
		return nil
	}
	type plain composeBuild
	return n.Decode((*plain)(b))
}

// composeCommand is a command as a list, or as a string (split on spaces,
// as Compose does without a shell).
type composeCommand []string

func (c *composeCommand) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*c = strings.Fields(n.Value)
		return nil
	}
	var list []string
	err := n.Decode(&list)
	*c = list
	return err
}

// composeEnv is `environment:` as a map or as a list of KEY=VALUE.
type composeEnv map[string]string

func (e *composeEnv) UnmarshalYAML(n *yaml.Node) error {
	out := composeEnv{}
	switch n.Kind {
	case yaml.MappingNode:
		var m map[string]*string
		if err := n.Decode(&m); err != nil {
			return err
		}
		for k, v := range m {
			if v == nil {
				return fmt.Errorf("environment: %s has no value (it would be taken from the host)", k)
			}
			out[k] = *v
		}
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, kv := range list {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				return fmt.Errorf("environment: %q has no value (it would be taken from the host)", kv)
			}
			out[k] = v
		}
	default:
		return fmt.Errorf("environment: neither a map nor a list")
	}
	*e = out
	return nil
}

// composeDependsOn is `depends_on:` as a list (condition service_started)
// or as a map of service to condition.
type composeDependsOn map[string]string

func (d *composeDependsOn) UnmarshalYAML(n *yaml.Node) error {
	out := composeDependsOn{}
	switch n.Kind {
	case yaml.SequenceNode:
		var list []string
		if err := n.Decode(&list); err != nil {
			return err
		}
		for _, s := range list {
			out[s] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		for s, v := range m {
			out[s] = cmpOr(v.Condition, "service_started")
		}
	default:
		return fmt.Errorf("depends_on: neither a list nor a map")
	}
	*d = out
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// ourBinaries are the commands the images hold: productionBinaries in the
// production image (the Dockerfile's last stage), fakedownstream in the
// demo image (its demo target), which the compose file builds for its fake
// service.
var (
	ourBinaries        = []string{"api", "worker", "leadintake", "fakedownstream"}
	productionBinaries = []string{"api", "worker", "leadintake"}
)

// demoCommands are the commands that must never be in the production image:
// stand-ins for the downstream services and demo pages.
var demoCommands = []string{"fakedownstream", "demosite"}

// officialPostgres matches the official postgres image, with a tag.
var officialPostgres = regexp.MustCompile(`^(docker\.io/(library/)?)?postgres(:[\w][\w.-]*)?$`)

func readCompose(t *testing.T) (composeFile, string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return cf, string(raw)
}

func TestComposeFile(t *testing.T) {
	t.Parallel()
	cf, raw := readCompose(t)
	// Services of a profile (third-party images, off by default) are
	// TestComposeObservability's.
	for name, svc := range cf.Services {
		if len(svc.Profiles) > 0 {
			delete(cf.Services, name)
		}
	}

	for _, name := range []string{"postgres", "migrate", "api", "worker", "fake"} {
		if _, ok := cf.Services[name]; !ok {
			t.Fatalf("docker-compose.yml has no service %q", name)
		}
	}

	// Every service is the official postgres image or one of our binaries,
	// built from this repository.
	binary := map[string]string{} // service -> binary
	for name, svc := range cf.Services {
		if officialPostgres.MatchString(svc.Image) && svc.Build == nil {
			continue
		}
		if svc.Build == nil || filepath.Clean(svc.Build.Context) != "." || cmpOr(svc.Build.Dockerfile, "Dockerfile") != "Dockerfile" {
			t.Errorf("service %s: neither the official postgres image nor built from this repository's Dockerfile (image %q, build %+v)", name, svc.Image, svc.Build)
			continue
		}
		if len(svc.Entrypoint) > 0 {
			t.Errorf("service %s: entrypoint %v; the image's binaries are run by command", name, svc.Entrypoint)
		}
		if len(svc.Command) == 0 || !slices.Contains(ourBinaries, svc.Command[0]) {
			t.Errorf("service %s: command %v runs none of %v", name, svc.Command, ourBinaries)
			continue
		}
		binary[name] = svc.Command[0]
	}

	pg := cf.Services["postgres"]
	if !officialPostgres.MatchString(pg.Image) || !strings.Contains(pg.Image, ":") {
		t.Errorf("postgres: image %q, want the official postgres image with a tag", pg.Image)
	}
	if pg.Healthcheck == nil || !strings.Contains(strings.Join(pg.Healthcheck.Test, " "), "pg_isready") {
		t.Errorf("postgres: no pg_isready healthcheck")
	}
	if len(pg.Volumes) == 0 {
		t.Errorf("postgres: no volume for its data")
	}
	for _, v := range pg.Volumes {
		if src, _, ok := strings.Cut(v, ":"); ok && !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
			if _, declared := cf.Volumes[src]; !declared {
				t.Errorf("postgres: volume %q is not declared under volumes:", src)
			}
		}
	}

	// migrate runs `api migrate` once the database is healthy; api and
	// worker start after it completed successfully.
	if m := cf.Services["migrate"]; !slices.Equal(m.Command, []string{"api", "migrate"}) {
		t.Errorf("migrate: command %v, want [api migrate]", m.Command)
	}
	want := map[string]map[string]string{
		"migrate": {"postgres": "service_healthy"},
		"api":     {"postgres": "service_healthy", "migrate": "service_completed_successfully"},
		"worker":  {"postgres": "service_healthy", "migrate": "service_completed_successfully"},
	}
	for svc, deps := range want {
		for dep, cond := range deps {
			if got := cf.Services[svc].DependsOn[dep]; got != cond {
				t.Errorf("%s: depends_on %s: condition %q, want %q", svc, dep, got, cond)
			}
		}
	}
	if binary["api"] != "api" || binary["worker"] != "worker" || binary["fake"] != "fakedownstream" {
		t.Errorf("services run %v, want api: api, worker: worker, fake: fakedownstream", binary)
	}
	// The fake comes from the demo target; the others from the production
	// image, which holds no fake.
	for name, bin := range binary {
		target := cf.Services[name].Build.Target
		switch {
		case slices.Contains(demoCommands, bin) && target != "demo":
			t.Errorf("service %s runs %s from build target %q, want the Dockerfile's demo target", name, bin, target)
		case !slices.Contains(demoCommands, bin) && target != "" && target != "runtime":
			t.Errorf("service %s runs %s from build target %q, want the production image (the last stage)", name, bin, target)
		}
	}
	if cf.Services["fake"].Image == cf.Services["api"].Image {
		t.Errorf("the fake service's image %q is the api's: the production image would be tagged with a fake in it", cf.Services["fake"].Image)
	}

	// Environment: only variables the binary lists in its -h output, the
	// required ones present, values it will accept.
	usage := map[string]map[string]usageVar{}
	for _, bin := range []string{"api", "worker"} {
		r := runBinary(t, bin, nil, "-h")
		if r.code != 0 {
			t.Fatalf("%s -h: exit %d: %s", bin, r.code, r.stderr)
		}
		usage[bin] = parseUsage(t, r.stdout)
	}
	fakeHelp := runBinary(t, "fakedownstream", nil, "-h")
	pgEnv := pg.Environment
	for name, bin := range binary {
		env := cf.Services[name].Environment
		if bin == "fakedownstream" {
			for k := range env {
				if !strings.Contains(fakeHelp.stdout+fakeHelp.stderr, "("+k+")") {
					t.Errorf("%s: %s is not a variable fakedownstream -h names", name, k)
				}
			}
			continue
		}
		for k := range env {
			if _, ok := usage[bin][k]; !ok {
				t.Errorf("%s: %s is not a variable `%s -h` lists", name, k, bin)
			}
		}
		if slices.Equal(cf.Services[name].Command, []string{"api", "migrate"}) {
			if env["DATABASE_URL"] == "" {
				t.Errorf("%s: no DATABASE_URL", name)
			}
		} else {
			for k, v := range usage[bin] {
				if v.Required && env[k] == "" {
					t.Errorf("%s: required %s is not set", name, k)
				}
			}
		}
		for k, v := range env {
			if err := checkValue(usage[bin][k].Type, v); err != nil {
				t.Errorf("%s: %s=%q: %v", name, k, v, err)
			}
		}
		// The database URL points at the postgres service with its
		// credentials.
		if u, err := url.Parse(env["DATABASE_URL"]); err != nil || u.Hostname() != "postgres" {
			t.Errorf("%s: DATABASE_URL %q does not point at the postgres service", name, env["DATABASE_URL"])
		} else {
			pw, _ := u.User.Password()
			if u.User.Username() != pgEnv["POSTGRES_USER"] || pw != pgEnv["POSTGRES_PASSWORD"] || strings.TrimPrefix(u.Path, "/") != pgEnv["POSTGRES_DB"] {
				t.Errorf("%s: DATABASE_URL %q does not match the postgres service's user, password and database", name, env["DATABASE_URL"])
			}
		}
	}
	if env := cf.Services["worker"].Environment; env["SIMULATE_DOWNSTREAM"] != "true" {
		for _, k := range []string{"ENRICHMENT_URL", "CRM_URL", "NOTIFY_URL"} {
			u, err := url.Parse(env[k])
			if err != nil || u.Hostname() != "fake" {
				t.Errorf("worker: %s=%q does not point at the fake service", k, env[k])
			}
		}
		if cond, ok := cf.Services["worker"].DependsOn["fake"]; !ok || cond != "service_started" {
			t.Errorf("worker: does not depend on the fake service")
		}
	}
	if v := cf.Services["worker"].Environment["CRM_MODE"]; v != "" && v != "upsert" && v != "create" {
		t.Errorf("worker: CRM_MODE %q", v)
	}
	if fa := cf.Services["fake"].Environment["FAKE_ADDR"]; fa != "0.0.0.0:9090" {
		t.Errorf("fake: FAKE_ADDR %q, want 0.0.0.0:9090", fa)
	}

	// Published ports: host side on 127.0.0.1 only; each container port is
	// one the process listens on, on all interfaces.
	listens := map[string][]string{
		"api":    {cf.Services["api"].Environment["API_ADDR"], cf.Services["api"].Environment["ADMIN_ADDR"]},
		"worker": {cf.Services["worker"].Environment["ADMIN_ADDR"]},
		"fake":   {cf.Services["fake"].Environment["FAKE_ADDR"]},
	}
	if listens["api"][0] == "" {
		listens["api"][0] = usage["api"]["API_ADDR"].Default
	}
	for name, svc := range cf.Services {
		for _, p := range svc.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("%s: port %q is not bound to 127.0.0.1 on the host", name, p)
				continue
			}
			ok := false
			for _, addr := range listens[name] {
				host, port, err := net.SplitHostPort(addr)
				if err == nil && port == parts[2] && (host == "" || host == "0.0.0.0" || host == "::") {
					ok = true
				}
			}
			if !ok {
				t.Errorf("%s: port %q: nothing listens on container port %s on all interfaces (listens on %v)", name, p, parts[2], listens[name])
			}
		}
	}
	if len(cf.Services["api"].Ports) != 2 {
		t.Errorf("api: ports %v, want the API and the admin listener", cf.Services["api"].Ports)
	}

	// The demo's credentials: each bearer token shown is one API_CLIENTS
	// lists, and basic auth is set on the api so that River UI is served.
	clients, err := callers.ParseAPIClients(cf.Services["api"].Environment["API_CLIENTS"])
	if err != nil {
		t.Fatalf("api: API_CLIENTS: %v", err)
	}
	tokens := map[string]bool{}
	for _, m := range regexp.MustCompile(`Bearer ([A-Za-z0-9._~+/-]+)`).FindAllStringSubmatch(raw, -1) {
		tokens[m[1]] = true
	}
	if len(tokens) == 0 {
		t.Errorf("docker-compose.yml documents no demo bearer token")
	}
	for token := range tokens {
		if _, ok := clients.Authenticate(token); !ok {
			sum := sha256.Sum256([]byte(token))
			t.Errorf("the documented token %q (sha256 %s) is not in API_CLIENTS", token, hex.EncodeToString(sum[:]))
		}
	}
	if env := cf.Services["api"].Environment; env["ADMIN_USER"] == "" || env["ADMIN_PASSWORD"] == "" {
		t.Errorf("api: ADMIN_USER and ADMIN_PASSWORD must be set for River UI")
	}
	if strings.Contains(raw, "0.0.0.0:8081") && !strings.Contains(strings.ToLower(raw), "inside the container") {
		t.Errorf("docker-compose.yml: ADMIN_ADDR on 0.0.0.0 needs its comment (why, and that the host side is 127.0.0.1)")
	}

	// Docker's default stop grace is 10 s: api and worker need at least
	// SHUTDOWN_TIMEOUT to drain.
	for _, name := range []string{"api", "worker"} {
		svc := cf.Services[name]
		shutdown, err := time.ParseDuration(cmpOr(svc.Environment["SHUTDOWN_TIMEOUT"], usage[name]["SHUTDOWN_TIMEOUT"].Default))
		if err != nil {
			t.Fatalf("%s: SHUTDOWN_TIMEOUT: %v", name, err)
		}
		grace, err := time.ParseDuration(cmpOr(svc.StopGracePeriod, "10s"))
		if err != nil || grace <= shutdown {
			t.Errorf("%s: stop_grace_period %q is not longer than SHUTDOWN_TIMEOUT %s", name, svc.StopGracePeriod, shutdown)
		}
	}
}

// dockerStage is one stage of a Dockerfile: its FROM's image (or the stage
// it is built on), its name, and its instructions (continued lines joined,
// comments left out), FROM first.
type dockerStage struct {
	from, name string
	lines      []string
}

// readDockerfile reads the Dockerfile's stages.
func readDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Join continued lines, drop comments.
	var lines []string
	cur := ""
	for l := range strings.SplitSeq(string(raw), "\n") {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		if l = cur + l; l != "" {
			lines = append(lines, l)
		}
		cur = ""
	}
	var stages []dockerStage
	for _, l := range lines {
		if f := strings.Fields(l); strings.EqualFold(f[0], "FROM") {
			st := dockerStage{}
			for i := 1; i < len(f); i++ {
				switch {
				case strings.HasPrefix(f[i], "--"):
				case strings.EqualFold(f[i], "AS") && i+1 < len(f):
					st.name = f[i+1]
					i++
				case st.from == "":
					st.from = f[i]
				}
			}
			stages = append(stages, st)
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %q before the first FROM", l)
		}
		stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, l)
	}
	return stages
}

// stageNamed returns the stage called name, and whether there is one.
func stageNamed(stages []dockerStage, name string) (dockerStage, bool) {
	for _, st := range stages {
		if st.name == name {
			return st, true
		}
	}
	return dockerStage{}, false
}

// copiedFrom returns the stages whose files the stage's COPY --from take,
// and those they are built on, in turn.
func copiedFrom(t *testing.T, stages []dockerStage, st dockerStage) []dockerStage {
	t.Helper()
	var out []dockerStage
	seen := map[string]bool{}
	var add func(name string)
	add = func(name string) {
		src, ok := stageNamed(stages, name)
		if !ok || seen[name] {
			return // an image, not a stage
		}
		seen[name] = true
		out = append(out, src)
		add(src.from)
	}
	for _, l := range st.lines {
		for _, f := range strings.Fields(l) {
			if from, ok := strings.CutPrefix(f, "--from="); ok && strings.EqualFold(strings.Fields(l)[0], "COPY") {
				add(from)
			}
		}
	}
	return out
}

// The Dockerfile: multi-stage, static binaries of the production commands
// built by the Makefile's Go toolchain, a non-root runtime image that holds
// them and nothing of the demo's (no fake downstream, no demo site, nothing
// from a stage that builds one), and a demo target with the fake alone.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := readDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stage(s), want a build stage and a runtime stage", len(stages))
	}
	build, runtime := stages[0].lines, stages[len(stages)-1].lines
	// The image's Go is the Makefile's toolchain: what is tested is what
	// ships.
	makefile, err := os.ReadFile(filepath.Join("..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^export GOTOOLCHAIN\s*\??=\s*go(\S+)`).FindSubmatch(makefile)
	if m == nil {
		t.Fatal("Makefile: no export GOTOOLCHAIN = goX.Y.Z")
	}
	if want := "FROM golang:" + string(m[1]) + "-"; !strings.HasPrefix(build[0], want) {
		t.Errorf("Dockerfile: build stage %q, want %s... (the Makefile's GOTOOLCHAIN)", build[0], want)
	}
	buildText := strings.Join(build, "\n")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "./cmd/api", "./cmd/worker", "./cmd/leadintake", "--mount=type=cache,target=/go/pkg/mod", "go mod download"} {
		if !strings.Contains(buildText, want) {
			t.Errorf("Dockerfile: the build stage has no %q", want)
		}
	}
	runtimeText := strings.Join(runtime, "\n")
	for _, bin := range productionBinaries {
		if !regexp.MustCompile(`(?m)^COPY --from=\S+ .*\b` + bin + `\b`).MatchString(runtimeText) {
			t.Errorf("Dockerfile: the runtime stage does not copy %s from the build", bin)
		}
	}
	// Nothing of the demo's in the production image: not copied by name,
	// nor built in a stage it copies from (a COPY of a whole directory
	// would take it along).
	for _, demo := range demoCommands {
		if regexp.MustCompile(`(?im)^(COPY|ADD) .*` + demo).MatchString(runtimeText) {
			t.Errorf("Dockerfile: the runtime stage copies %s", demo)
		}
		for _, src := range copiedFrom(t, stages, stages[len(stages)-1]) {
			if strings.Contains(strings.Join(src.lines, "\n"), "./cmd/"+demo) {
				t.Errorf("Dockerfile: the runtime stage copies from stage %s, which builds %s", src.name, demo)
			}
		}
	}
	// The demo target: the fake alone, which docker-compose.yml builds for
	// its fake service.
	demo, ok := stageNamed(stages, "demo")
	if !ok {
		t.Fatal("Dockerfile: no demo stage (docker-compose.yml's fake service builds it)")
	}
	demoText := strings.Join(demo.lines, "\n")
	if !regexp.MustCompile(`(?m)^COPY --from=\S+ .*\bfakedownstream\b`).MatchString(demoText) ||
		!regexp.MustCompile(`(?m)^CMD \["fakedownstream"\]`).MatchString(demoText) ||
		!regexp.MustCompile(`(?m)^EXPOSE .*\b9090\b`).MatchString(demoText) {
		t.Errorf("Dockerfile: the demo stage does not copy and run fakedownstream on 9090:\n%s", demoText)
	}
	for _, bin := range productionBinaries {
		if regexp.MustCompile(`(?m)^COPY .*\b` + bin + `\b`).MatchString(demoText) {
			t.Errorf("Dockerfile: the demo stage copies %s: run it from the production image", bin)
		}
	}
	user := ""
	for _, l := range runtime {
		if f := strings.Fields(l); strings.EqualFold(f[0], "USER") && len(f) > 1 {
			user = f[1]
		}
	}
	if strings.Contains(runtime[0], ":nonroot") && user == "" {
		user = "nonroot"
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("Dockerfile: the runtime stage runs as %q, want a non-root user", user)
	}
	for _, port := range []string{"8080", "8081", "8082"} {
		if !regexp.MustCompile(`(?m)^EXPOSE .*\b` + port + `\b`).MatchString(runtimeText) {
			t.Errorf("Dockerfile: port %s is not exposed", port)
		}
	}
	if !regexp.MustCompile(`(?m)^(CMD|ENTRYPOINT) \[`).MatchString(runtimeText) {
		t.Errorf("Dockerfile: no exec-form CMD or ENTRYPOINT")
	}
	// The build context leaves out what the build does not need.
	ignore, err := os.ReadFile(filepath.Join("..", ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{".git", "bin"} {
		if !slices.Contains(strings.Fields(string(ignore)), want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
}

// checkValue checks a value against the type envconfig's usage table gives
// its variable.
func checkValue(typ, v string) error {
	switch typ {
	case "Duration":
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			return fmt.Errorf("not a positive duration")
		}
	case "Integer":
		if _, err := strconv.Atoi(v); err != nil {
			return fmt.Errorf("not an integer")
		}
	case "True or False":
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("not a boolean")
		}
	}
	return nil
}
