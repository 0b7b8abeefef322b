package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/geotoll/geotoll/geofence"
)

// How a configuration file merges into the defaults: a scalar replaces
// the default; a tier replaces only the fields it sets (tiers:
// {free: {shadow: true}} shadows free, its rate and capacity kept); a
// layer (layers, geofence.layers) whose name is a default layer's replaces
// only the fields it sets, and a layer with a new name is added. A name
// given twice in the file (two tiers or two layers of one list) is an
// error: merged, the second would change the first and one of them be
// lost without a word.
// demo_layers: false drops the default layers first. A collection whose
// key is left empty merges nothing (keepWhereEmpty). Lists of strings
// (properties, trusted_proxies, origins…) are replaced whole.

// TierMap is throttle.tiers: tiers by name, merged field by field.
type TierMap map[string]TierConfig

// UnmarshalYAML merges a mapping of tiers into m.
func (m *TierMap) UnmarshalYAML(node *yaml.Node) error {
	if node.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: throttle.tiers must be a mapping of tier names", node.Line)
	}
	if *m == nil {
		*m = TierMap{}
	}
	seen := map[string]int{} // line by name
	for i := 0; i+1 < len(node.Content); i += 2 {
		name := node.Content[i].Value
		// yaml.v3 refuses a key given twice only in what it decodes
		// itself, not in a node handed to UnmarshalYAML.
		if line, dup := seen[name]; dup {
			return fmt.Errorf("throttle.tiers.%s (line %d): already defined at line %d", name, node.Content[i].Line, line)
		}
		seen[name] = node.Content[i].Line
		tier := (*m)[name]
		if err := strictDecode(node.Content[i+1], &tier); err != nil {
			return fmt.Errorf("throttle.tiers.%s (line %d): %w", name, node.Content[i].Line, err)
		}
		(*m)[name] = tier
	}
	return nil
}

// LayerList is the tile layers, merged by name.
type LayerList []LayerConfig

// UnmarshalYAML merges a sequence of layers into l by name.
func (l *LayerList) UnmarshalYAML(node *yaml.Node) error {
	merged, err := mergeByName(*l, node, "layers", func(c *LayerConfig) string { return c.Name })
	*l = merged
	return err
}

// FenceLayerList is the geofence layers, merged by name.
type FenceLayerList []geofence.Layer

// UnmarshalYAML merges a sequence of layers into l by name.
func (l *FenceLayerList) UnmarshalYAML(node *yaml.Node) error {
	merged, err := mergeByName(*l, node, "geofence.layers", func(c *geofence.Layer) string { return c.Name })
	*l = merged
	return err
}

// mergeByName decodes node, a sequence of named records, onto list: a
// record whose name is in list is decoded onto that entry, the fields it
// does not set kept; any other is appended. A name node gives twice is an
// error: only list's entries (the defaults) are merged into.
func mergeByName[T any](list []T, node *yaml.Node, key string, name func(*T) string) ([]T, error) {
	if node.Kind != yaml.SequenceNode {
		return list, fmt.Errorf("line %d: %s must be a list", node.Line, key)
	}
	out := append([]T(nil), list...)
	seen := map[string]int{} // index in node by name
	for i, item := range node.Content {
		if v := unalias(item, 0); v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			return out, fmt.Errorf("%s[%d] (line %d): an empty entry: give its name and fields, or remove its dash", key, i, item.Line)
		}
		var probe struct {
			Name string `yaml:"name"`
		}
		_ = item.Decode(&probe) // a bad record is reported by the strict decode below
		if j, dup := seen[probe.Name]; dup && probe.Name != "" {
			return out, fmt.Errorf("%s[%d] (line %d): name %q is already %s[%d] (line %d): give each layer once, with all its fields",
				key, i, item.Line, probe.Name, key, j, node.Content[j].Line)
		}
		seen[probe.Name] = i
		var rec T
		at := -1
		for j := range out {
			if probe.Name != "" && name(&out[j]) == probe.Name {
				rec, at = out[j], j
				break
			}
		}
		if err := strictDecode(item, &rec); err != nil {
			return out, fmt.Errorf("%s[%d] (line %d): %w", key, i, item.Line, err)
		}
		if at >= 0 {
			out[at] = rec
		} else {
			out = append(out, rec)
		}
	}
	return out, nil
}

// strictDecode decodes node onto out, refusing unknown keys (Node.Decode
// alone would ignore them). The node is encoded on its own first, its
// aliases replaced by what they name: an anchor elsewhere in the file is
// not in that encoding.
func strictDecode(node *yaml.Node, out any) error {
	raw, err := yaml.Marshal(unalias(node, 0))
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(out); errors.Is(err, io.EOF) {
		return nil // an entry left empty (every field commented out) sets nothing
	} else if err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			msgs := make([]string, len(te.Errors))
			for i, m := range te.Errors {
				// Line numbers of the re-encoded record mean nothing to
				// the reader of the file: the caller names the record.
				msgs[i] = reencodedLine.ReplaceAllString(m, "")
			}
			return errors.New(strings.Join(msgs, "; "))
		}
		return err
	}
	return nil
}

// reencodedLine matches the line numbers yaml.v3 gives in a decoding
// error ("line 3: ", "… already defined at line 1"), which in strictDecode
// count lines of the node's own encoding, not of the file.
var reencodedLine = regexp.MustCompile(`^line \d+: | at line \d+`)

// unalias returns a copy of n with every alias replaced by a copy of the
// node it names (anchors dropped, so that none is defined twice), as deep
// as maxAliasDepth: yaml.v3 refuses a document whose aliases expand
// without end before this runs.
func unalias(n *yaml.Node, depth int) *yaml.Node {
	if n == nil || depth > maxAliasDepth {
		return n
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return unalias(n.Alias, depth+1)
	}
	c := *n
	c.Anchor = ""
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = unalias(k, depth+1)
	}
	return &c
}

// maxAliasDepth bounds unalias: far deeper than any configuration.
const maxAliasDepth = 64

// maxExpandedNodes bounds the nodes of a configuration file with its
// aliases expanded: a hundred times a large configuration's, and a tiny
// part of what a few lines of aliases can name (each merge of ten aliases
// of the entry before multiplies the layers by ten). yaml.v3 bounds its
// own decoding so, but unalias copies what aliases name to decode a layer
// or tier on its own, and refuseFractions follows them.
const maxExpandedNodes = 100_000

// refuseAliasBombs returns an error when doc, its aliases expanded,
// holds more than maxExpandedNodes nodes. Each node's expanded size is
// counted once (an alias is the size of what it names), so the count
// costs the file's own nodes, whatever they expand to.
func refuseAliasBombs(doc *yaml.Node) error {
	sizes := map[*yaml.Node]int{}
	var size func(n *yaml.Node, depth int) int
	size = func(n *yaml.Node, depth int) int {
		if n == nil {
			return 0
		}
		if s, ok := sizes[n]; ok {
			return s
		}
		s := 1
		switch {
		case depth > maxAliasDepth:
			s = maxExpandedNodes + 1
		case n.Kind == yaml.AliasNode:
			s = size(n.Alias, depth+1)
		default:
			for _, c := range n.Content {
				s = min(s+size(c, depth+1), maxExpandedNodes+1)
			}
		}
		sizes[n] = s
		return s
	}
	if size(doc, 0) > maxExpandedNodes {
		return fmt.Errorf("it holds more than %d YAML nodes, its aliases expanded, or nests deeper than %d: far more than a configuration needs", maxExpandedNodes, maxAliasDepth)
	}
	return nil
}

// keepWhereEmpty undoes what yaml.v3 does to a merged collection (layers,
// geofence.layers, throttle.tiers) whose key is left empty, as when its
// entries are commented out: it sets the collection to nil without asking
// its UnmarshalYAML. An empty key merges nothing, as [] and {} do.
func keepWhereEmpty(doc *yaml.Node, cfg *Config, before Config) {
	if isNull(doc, "layers") {
		cfg.Layers = before.Layers
	}
	if isNull(doc, "geofence", "layers") {
		cfg.Geofence.Layers = before.Geofence.Layers
	}
	if isNull(doc, "throttle", "tiers") {
		cfg.Throttle.Tiers = before.Throttle.Tiers
	}
}

// isNull reports whether the value at path (mapping keys) in doc is null.
func isNull(doc *yaml.Node, path ...string) bool {
	n := doc
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return false
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return false
		}
		n = next
	}
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// refuseFractions walks the YAML document n as the Go type t decodes it and
// refuses a number with a fraction given to a whole-number key: yaml.v3
// truncates it (max_in_flight: 0.5 would be 0, the default cap). path names
// the key in the error.
func refuseFractions(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	n = named(n) // what an alias names, checked where it is used
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Tag == "!!merge" {
				if err := refuseMergedFractions(n.Content[i+1], t, path); err != nil {
					return err
				}
				continue
			}
			if f, ok := structFieldByYAML(t, n.Content[i].Value); ok {
				if err := refuseFractions(n.Content[i+1], f.Type, join(path, n.Content[i].Value)); err != nil {
					return err
				}
			}
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Map:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Tag == "!!merge" {
				if err := refuseMergedFractions(n.Content[i+1], t, path); err != nil {
					return err
				}
				continue
			}
			if err := refuseFractions(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for i, item := range n.Content {
			if err := refuseFractions(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && t != durationType && wholeNumber(t.Kind()):
		if v, err := strconv.ParseFloat(n.Value, 64); err == nil && v != math.Trunc(v) {
			return fmt.Errorf("line %d: %s: %s is not a whole number", n.Line, path, n.Value)
		}
	}
	return nil
}

// refuseMergedFractions checks the value of a merge key ("<<") of a
// mapping of type t — the mapping or mappings it merges — as the mapping
// itself: their keys are its own.
func refuseMergedFractions(value *yaml.Node, t reflect.Type, path string) error {
	value = named(value)
	merged := []*yaml.Node{value}
	if value.Kind == yaml.SequenceNode {
		merged = value.Content
	}
	for _, m := range merged {
		if err := refuseFractions(m, t, path); err != nil {
			return err
		}
	}
	return nil
}

// named is n, or the node n names when it is an alias (as deep as
// maxAliasDepth).
func named(n *yaml.Node) *yaml.Node {
	for depth := 0; n.Kind == yaml.AliasNode && n.Alias != nil && depth <= maxAliasDepth; depth++ {
		n = n.Alias
	}
	return n
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func wholeNumber(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Uint64
}
