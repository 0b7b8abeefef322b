package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/geotoll/geotoll/internal/calibrate"
	"github.com/geotoll/geotoll/server"
	"github.com/geotoll/geotoll/throttle"
)

// validateReadiness bounds the background readiness checks: a round
// pings the database and Redis, so an interval of 1ns would ping them as
// fast as they answer, and a timeout of an hour would leave /readyz
// reporting a dead dependency as ready for that long.
func (h HTTPConfig) validateReadiness() []error {
	var errs []error
	if h.ReadyInterval < server.MinReadyInterval || h.ReadyInterval > server.MaxReadyInterval {
		errs = append(errs, fmt.Errorf("http.ready_interval %s must be within %s..%s: each round of readiness checks pings the database and Redis",
			h.ReadyInterval, server.MinReadyInterval, server.MaxReadyInterval))
	}
	if h.ReadyTimeout < server.MinReadyTimeout || h.ReadyTimeout > server.MaxReadyTimeout {
		errs = append(errs, fmt.Errorf("http.ready_timeout %s must be within %s..%s: a round of readiness checks that takes longer has found its dependency down",
			h.ReadyTimeout, server.MinReadyTimeout, server.MaxReadyTimeout))
	}
	return errs
}

// validateListeners: listen is required, and it and metrics_listen (when
// set) are host:port, the port a number from 0 to 65535 or a service name
// of the system's (no network is asked), and not one address twice. An
// empty listen would bind a random port on every interface; the others
// passed config check and failed serve, after its start-up.
func (c Config) validateListeners() []error {
	var errs []error
	if c.Listen == "" {
		errs = append(errs, errors.New(`listen must be set: an address such as ":8080" or "127.0.0.1:8080" (empty would listen on a random port of every interface)`))
	} else if err := listenAddr(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf(`listen %q must be host:port, such as ":8080" or "127.0.0.1:8080": %w`, c.Listen, err))
	}
	if c.MetricsListen != "" {
		if err := listenAddr(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf(`metrics_listen %q must be host:port, such as "127.0.0.1:9090" (or empty: none): %w`, c.MetricsListen, err))
		} else if sameListener(c.Listen, c.MetricsListen) {
			errs = append(errs, fmt.Errorf(`metrics_listen %q and listen %q are one address: give the operators' endpoints a port of their own (or leave metrics_listen empty: they are served on listen)`, c.MetricsListen, c.Listen))
		}
	}
	return errs
}

// listenAddr checks a listen address as net.Listen will read it, without
// a lookup of its host.
func listenAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if n, err := strconv.Atoi(port); err == nil {
		if n < 0 || n > 65535 {
			return fmt.Errorf("port %d is not within 0..65535", n)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q is neither a number nor a known service", port)
	}
	return nil
}

// sameListener reports whether two valid listen addresses would bind one
// socket: the same port (not 0, a random one), on the same host or on
// every interface. Hosts are compared as the addresses net.Listen binds:
// "localhost" is its IPv4 loopback (Listen takes a name's IPv4 address
// first), and an IPv4-mapped IPv6 address is its IPv4 one.
func sameListener(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	na, _ := net.LookupPort("tcp", pa)
	nb, _ := net.LookupPort("tcp", pb)
	if na == 0 || na != nb {
		return false
	}
	ha, hb = listenHost(ha), listenHost(hb)
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || every(ha) || every(hb)
}

// listenHost is a listen address's host in one spelling: an IP literal
// as netip prints it (IPv4-mapped ones unmapped), "localhost" as
// 127.0.0.1, another name lower-cased.
func listenHost(h string) string {
	if strings.EqualFold(h, "localhost") {
		return "127.0.0.1"
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return strings.ToLower(h)
}

// validateTierCosts refuses a tier's max_cost that no request can meet:
// every price is at least its weights' base (a cache hit's price), so a
// max_cost below the least base of the default and the layers' weights
// answers every request of the tier 422. The weights file holds work
// models only, never a base: the least base is known without it.
func (c Config) validateTierCosts() []error {
	base := c.Throttle.Weights.apply(throttle.DefaultWeights())
	least := base.Base
	for _, lc := range c.Layers {
		least = min(least, lc.Weights.apply(base).Base)
	}
	var errs []error
	for _, name := range tierNames(c) {
		if mc := c.Throttle.Tiers[name].MaxCost; mc > 0 && !math.IsInf(mc, 1) && mc < least {
			errs = append(errs, fmt.Errorf("throttle.tiers.%s.max_cost %g is below %g, the least any request costs (throttle.weights.base, or a layer's weights.base): every request of the tier would be refused (422)",
				name, mc, least))
		}
	}
	return errs
}

// singleDocument refuses YAML holding more than one document: a reader
// that decodes one would ignore the others without a word (and a file
// whose first document is empty entirely).
func singleDocument(raw []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		return nil // empty, or an error the decoding proper reports
	}
	var second yaml.Node
	for {
		// Empty documents after the first (a trailing ---, one holding
		// only comments, as templating tools leave) lose nothing.
		second = yaml.Node{}
		err := dec.Decode(&second)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil || !emptyDocument(&second) {
			break
		}
	}
	line := second.Line
	if len(second.Content) > 0 {
		line = second.Content[0].Line
	}
	where := ""
	if line > 0 {
		where = fmt.Sprintf(" (the second starts near line %d)", line)
	}
	return fmt.Errorf("the file holds more than one YAML document%s: only one is read; remove the --- line that starts the next, or join the documents", where)
}

// emptyDocument reports whether doc holds nothing (or a null).
func emptyDocument(doc *yaml.Node) bool {
	return len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null"
}

// readWeightsFile is calibrate.ReadFile refusing a file of more than one
// YAML document, which it would read the first of.
func readWeightsFile(path string) (calibrate.File, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return calibrate.File{}, err
	}
	if err := singleDocument(raw); err != nil {
		return calibrate.File{}, fmt.Errorf("weights file %s: %w", path, err)
	}
	return calibrate.ReadFile(path)
}

// secretLines records, by line, the keys of the YAML document n (as the
// Go type t decodes it, below path) whose values are secret (a field
// tagged secret:"true"), on every line their values hold: a type error
// there must not show the value.
func secretLines(n *yaml.Node, t reflect.Type, path string, secret bool, lines map[int]string) {
	if secret {
		lines[n.Line] = path
		for _, c := range n.Content {
			secretLines(c, t, path, true, lines)
		}
		return
	}
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			secretLines(c, t, path, false, lines)
		}
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if f, ok := structFieldByYAML(t, n.Content[i].Value); ok {
				secretLines(n.Content[i+1], f.Type, join(path, n.Content[i].Value), f.Tag.Get("secret") == "true", lines)
			}
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			secretLines(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), false, lines)
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, item := range n.Content {
			secretLines(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), false, lines)
		}
	}
}

// structFieldByYAML is the field of struct type t whose YAML key is name,
// looking into inlined structs.
func structFieldByYAML(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		n, inline := yamlName(t.Field(i))
		if inline {
			if f, ok := structFieldByYAML(t.Field(i).Type, name); ok {
				return f, true
			}
			continue
		}
		if n == name {
			return t.Field(i), true
		}
	}
	return reflect.StructField{}, false
}

// typeErrorLine is the line a yaml.v3 type error names.
var typeErrorLine = regexp.MustCompile(`^line (\d+): `)

// hideSecrets rewrites a decoding error of the document doc so that it
// does not quote the value of a secret key: yaml.v3 quotes the start of a
// value it cannot decode, between backquotes ("line 3: cannot unmarshal
// !!str `SUPERSE...` into []string").
func hideSecrets(err error, doc *yaml.Node) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	lines := map[int]string{}
	secretLines(doc, reflect.TypeFor[Config](), "", false, lines)
	msgs := make([]string, len(te.Errors))
	hidden := false
	for i, m := range te.Errors {
		msgs[i] = m
		s := typeErrorLine.FindStringSubmatch(m)
		if s == nil {
			continue
		}
		from, to := strings.Index(m, "`"), strings.LastIndex(m, "`")
		line, _ := strconv.Atoi(s[1])
		if key, ok := lines[line]; ok && from >= 0 && to > from {
			// The line holds a secret's value (key's); the value the error
			// quotes may be another key's on the same line (flow style):
			// either way it is not shown.
			msgs[i] = s[0] + m[len(s[0]):from] + "(a value on a line holding " + key + ", a secret: not shown)" + m[to+1:]
			hidden = true
		}
	}
	if !hidden {
		return err
	}
	return errors.New("yaml: unmarshal errors:\n  " + strings.Join(msgs, "\n  "))
}
