package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// This file checks PromQL expressions (the rules and the dashboard in
// deploy/) against the metrics a real geotoll exports, without a PromQL
// engine: a small parser that knows which labels each subexpression's
// series carry, so that a metric name, a label in a matcher, a by (...),
// on (...) or $labels.x, or a label value that does not exist is an error.

// seriesInfo is what is known of one metric name's series.
type seriesInfo struct {
	labels map[string]bool
	// values seen per label in the scrape, nil for a recorded series
	// (its values are its sources').
	values map[string]map[string]bool
	// help words: the values a label may take that the scrape has not
	// shown yet (outcome="busy" before a pool was ever busy).
	help map[string]bool
}

// seriesCatalog maps metric names (histograms also as _bucket, _sum and
// _count) to what their series carry.
type seriesCatalog map[string]*seriesInfo

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// highCardinality are labels no rule or panel may keep in its result:
// each multiplies a metric's series (zoom: up to 23 per layer).
var highCardinality = []string{"zoom"}

var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// pqLabels is the label set of a subexpression's result: nil for a scalar
// or string, unknown when it cannot be told (absent()).
type pqLabels struct {
	set     map[string]bool
	scalar  bool
	unknown bool
}

func labelSet(names ...string) map[string]bool {
	s := make(map[string]bool, len(names))
	for _, n := range names {
		s[n] = true
	}
	return s
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

type pqToken struct {
	kind byte // 'i' identifier, 'n' number or duration, 's' string, 'o' operator or punctuation, 0 end
	text string
}

// lexPromQL splits an expression into tokens. Grafana variables ($job,
// ${job}, $__rate_interval) outside strings are numbers; range and
// subquery brackets are kept for the parser to skip.
func lexPromQL(expr string) ([]pqToken, error) {
	var toks []pqToken
	rs := []rune(expr)
	for i := 0; i < len(rs); {
		c := rs[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			var b strings.Builder
			for j < len(rs) && rs[j] != c {
				if rs[j] == '\\' && c != '`' && j+1 < len(rs) {
					j++
				}
				b.WriteRune(rs[j])
				j++
			}
			if j >= len(rs) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, pqToken{'s', b.String()})
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(rs) && rs[j] == '{' {
				for j < len(rs) && rs[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j]) || rs[j] == '_') {
					j++
				}
			}
			toks = append(toks, pqToken{'n', string(rs[i:j])})
			i = j
		case unicode.IsDigit(c) || c == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1]):
			j := i
			for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j]) || rs[j] == '.') {
				j++
			}
			toks = append(toks, pqToken{'n', string(rs[i:j])})
			i = j
		case unicode.IsLetter(c) || c == '_' || c == ':':
			j := i
			for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j]) || rs[j] == '_' || rs[j] == ':') {
				j++
			}
			word := string(rs[i:j])
			if w := strings.ToLower(word); w == "inf" || w == "nan" {
				toks = append(toks, pqToken{'n', word})
			} else {
				toks = append(toks, pqToken{'i', word})
			}
			i = j
		default:
			two := ""
			if i+1 < len(rs) {
				two = string(rs[i : i+2])
			}
			switch two {
			case "==", "!=", "<=", ">=", "=~", "!~":
				toks = append(toks, pqToken{'o', two})
				i += 2
				continue
			}
			if !strings.ContainsRune("(){}[],+-*/%^<>=@", c) {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, pqToken{'o', string(c)})
			i++
		}
	}
	return toks, nil
}

// pqParser checks one expression against a catalog, collecting errors.
type pqParser struct {
	toks []pqToken
	pos  int
	cat  seriesCatalog
	errs []string
	// used are the metric names the expression reads.
	used map[string]bool
}

func (p *pqParser) peek() pqToken {
	if p.pos < len(p.toks) {
		return p.toks[p.pos]
	}
	return pqToken{}
}

func (p *pqParser) next() pqToken {
	t := p.peek()
	if p.pos < len(p.toks) {
		p.pos++
	}
	return t
}

func (p *pqParser) errorf(format string, args ...any) {
	p.errs = append(p.errs, fmt.Sprintf(format, args...))
}

func (p *pqParser) expect(text string) bool {
	if t := p.next(); t.text != text || t.kind == 's' {
		p.errorf("expected %q, found %q", text, t.text)
		return false
	}
	return true
}

// checkPromQL parses expr and reports its result labels, the metrics it
// reads and every error.
func checkPromQL(expr string, cat seriesCatalog) (pqLabels, map[string]bool, []string) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return pqLabels{}, nil, []string{err.Error()}
	}
	p := &pqParser{toks: toks, cat: cat, used: map[string]bool{}}
	res := p.expr(0)
	if t := p.peek(); t.kind != 0 {
		p.errorf("unexpected %q after the expression", t.text)
	}
	if !res.unknown {
		for _, l := range highCardinality {
			if res.set[l] {
				p.errorf("the result keeps label %q: one series per value (sum it away)", l)
			}
		}
	}
	return res, p.used, p.errs
}

// binary operator precedence, lowest first.
func precedence(t pqToken) int {
	if t.kind == 's' || t.kind == 'n' {
		return 0
	}
	switch t.text {
	case "or":
		return 1
	case "and", "unless":
		return 2
	case "==", "!=", "<=", ">=", "<", ">":
		return 3
	case "+", "-":
		return 4
	case "*", "/", "%", "atan2":
		return 5
	case "^":
		return 6
	}
	return 0
}

func (p *pqParser) expr(minPrec int) pqLabels {
	left := p.unary()
	for {
		op := p.peek()
		prec := precedence(op)
		if prec == 0 || prec < minPrec {
			return left
		}
		p.next()
		if p.peek().text == "bool" {
			p.next()
		}
		var on, ignoring []string
		var group string
		switch p.peek().text {
		case "on":
			p.next()
			on = p.labelList()
		case "ignoring":
			p.next()
			ignoring = p.labelList()
		}
		if t := p.peek().text; t == "group_left" || t == "group_right" {
			group = t
			p.next()
			if p.peek().text == "(" {
				p.labelList()
			}
		}
		nextMin := prec + 1
		if op.text == "^" {
			nextMin = prec // right-associative
		}
		right := p.expr(nextMin)
		left = p.combine(op.text, left, right, on, ignoring, group)
	}
}

// combine is the result of a binary operation, checking its matching.
func (p *pqParser) combine(op string, left, right pqLabels, on, ignoring []string, group string) pqLabels {
	switch {
	case left.scalar:
		return right
	case right.scalar:
		return left
	case left.unknown || right.unknown:
		return pqLabels{unknown: true}
	}
	for _, side := range []pqLabels{left, right} {
		for _, l := range append(slices.Clone(on), ignoring...) {
			if !side.set[l] {
				p.errorf("%s: label %q of on/ignoring is not on both sides (%v, %v)", op, l, sortedKeys(left.set), sortedKeys(right.set))
			}
		}
	}
	if op == "or" {
		s := maps.Clone(left.set)
		for k := range right.set {
			s[k] = true
		}
		return pqLabels{set: s}
	}
	if on == nil && ignoring == nil && group == "" && op != "and" && op != "unless" &&
		!slices.Equal(sortedKeys(left.set), sortedKeys(right.set)) {
		p.errorf("%s: sides carry different labels %v and %v: no series would match", op, sortedKeys(left.set), sortedKeys(right.set))
	}
	switch {
	case group == "group_right":
		return right
	case group == "group_left" || op == "and" || op == "unless":
		return left
	case on != nil:
		return pqLabels{set: labelSet(on...)}
	}
	s := maps.Clone(left.set)
	for _, l := range ignoring {
		delete(s, l)
	}
	return pqLabels{set: s}
}

func (p *pqParser) unary() pqLabels {
	if t := p.peek(); t.kind == 'o' && (t.text == "-" || t.text == "+") {
		p.next()
		return p.unary()
	}
	res := p.primary()
	p.postfix()
	return res
}

// postfix skips a range or subquery, offset and @.
func (p *pqParser) postfix() {
	for {
		switch t := p.peek(); {
		case t.kind == 'o' && t.text == "[":
			for t := p.next(); t.kind != 0 && t.text != "]"; t = p.next() {
			}
		case t.kind == 'i' && t.text == "offset":
			p.next()
			if p.peek().text == "-" {
				p.next()
			}
			p.next()
		case t.kind == 'o' && t.text == "@":
			p.next()
			if p.next().kind == 'i' { // start() or end()
				p.expect("(")
				p.expect(")")
			}
		default:
			return
		}
	}
}

// labelList reads "(a, b, …)".
func (p *pqParser) labelList() []string {
	if !p.expect("(") {
		return nil
	}
	var labels []string
	for p.peek().text != ")" {
		t := p.next()
		if t.kind != 'i' {
			p.errorf("expected a label name, found %q", t.text)
			return labels
		}
		labels = append(labels, t.text)
		if p.peek().text == "," {
			p.next()
		}
	}
	p.next()
	return labels
}

func (p *pqParser) primary() pqLabels {
	t := p.next()
	switch {
	case t.kind == 'n':
		return pqLabels{scalar: true}
	case t.kind == 's':
		return pqLabels{scalar: true}
	case t.kind == 'o' && t.text == "(":
		res := p.expr(0)
		p.expect(")")
		return res
	case t.kind == 'i' && aggregations[t.text]:
		return p.aggregation(t.text)
	case t.kind == 'i' && p.peek().text == "(":
		return p.function(t.text)
	case t.kind == 'i':
		return p.selector(t.text)
	}
	p.errorf("unexpected %q", t.text)
	return pqLabels{unknown: true}
}

func (p *pqParser) aggregation(op string) pqLabels {
	var by, without []string
	grouping := func() {
		switch p.peek().text {
		case "by":
			p.next()
			by = p.labelList()
		case "without":
			p.next()
			without = p.labelList()
			p.errorf("%s without (…) keeps every label not named, zoom among them: use by (…)", op)
		}
	}
	grouping()
	p.expect("(")
	var args []pqLabels
	for p.peek().text != ")" && p.peek().kind != 0 {
		args = append(args, p.expr(0))
		if p.peek().text == "," {
			p.next()
		}
	}
	p.expect(")")
	grouping()
	if len(args) == 0 {
		p.errorf("%s of nothing", op)
		return pqLabels{unknown: true}
	}
	arg := args[len(args)-1]
	if arg.unknown {
		return arg
	}
	if arg.scalar {
		p.errorf("%s of a scalar", op)
		return arg
	}
	for _, l := range by {
		if !arg.set[l] {
			p.errorf("%s by (%s): label %q is not on what it aggregates (%v)", op, strings.Join(by, ", "), l, sortedKeys(arg.set))
		}
	}
	switch op {
	case "topk", "bottomk", "limitk", "limit_ratio":
		return arg
	}
	if by != nil {
		return pqLabels{set: labelSet(by...)}
	}
	s := maps.Clone(arg.set)
	for _, l := range without {
		delete(s, l)
	}
	if without == nil {
		s = map[string]bool{}
	}
	return pqLabels{set: s}
}

func (p *pqParser) function(name string) pqLabels {
	p.expect("(")
	var args []pqLabels
	var strs []string
	for p.peek().text != ")" && p.peek().kind != 0 {
		if t := p.peek(); t.kind == 's' {
			strs = append(strs, t.text)
		}
		args = append(args, p.expr(0))
		if p.peek().text == "," {
			p.next()
		}
	}
	p.expect(")")
	var vec *pqLabels
	for i := range args {
		if !args[i].scalar {
			vec = &args[i]
			break
		}
	}
	switch name {
	case "time", "pi", "scalar":
		return pqLabels{scalar: true}
	case "vector":
		return pqLabels{set: map[string]bool{}}
	case "absent", "absent_over_time":
		return pqLabels{unknown: true}
	}
	if vec == nil {
		p.errorf("%s(…) has no vector argument", name)
		return pqLabels{unknown: true}
	}
	if vec.unknown {
		return *vec
	}
	s := maps.Clone(vec.set)
	switch name {
	case "histogram_quantile", "histogram_fraction":
		if !s["le"] {
			p.errorf("%s over series without le (%v)", name, sortedKeys(s))
		}
		delete(s, "le")
	case "label_replace", "label_join":
		if len(strs) > 0 {
			s[strs[0]] = true
		}
	}
	return pqLabels{set: s}
}

var plainAlternatives = regexp.MustCompile(`^[A-Za-z0-9_-]+(\|[A-Za-z0-9_-]+)*$`)

func (p *pqParser) selector(name string) pqLabels {
	info, ok := p.cat[name]
	if !ok {
		p.errorf("metric %s: not exported", name)
		info = nil
	} else {
		p.used[name] = true
	}
	if p.peek().text == "{" {
		p.next()
		for p.peek().text != "}" && p.peek().kind != 0 {
			label, op, value := p.next(), p.next(), p.next()
			if label.kind != 'i' || op.kind != 'o' || value.kind != 's' {
				p.errorf("%s: bad matcher %s%s%s", name, label.text, op.text, value.text)
				break
			}
			if p.peek().text == "," {
				p.next()
			}
			if info == nil || label.text == "__name__" {
				continue
			}
			if !info.labels[label.text] {
				p.errorf("%s{%s%s%q}: %s has no label %q (it has %v)", name, label.text, op.text, value.text, name, label.text, sortedKeys(info.labels))
				continue
			}
			p.checkValue(name, info, label.text, op.text, value.text)
		}
		p.expect("}")
	}
	if info == nil {
		return pqLabels{unknown: true}
	}
	return pqLabels{set: maps.Clone(info.labels)}
}

// checkValue: a value an = or =~ matcher names (a plain alternation, for
// =~) must be one the scrape showed or the metric's help names.
func (p *pqParser) checkValue(name string, info *seriesInfo, label, op, value string) {
	if info.values == nil || slices.Contains(targetLabels, label) || strings.Contains(value, "$") {
		return
	}
	var want []string
	switch {
	case op == "=":
		want = []string{value}
	case op == "=~" && plainAlternatives.MatchString(value):
		want = strings.Split(value, "|")
	}
	for _, v := range want {
		if !info.values[label][v] && !info.help[v] {
			p.errorf("%s{%s%s%q}: value %q is neither in the scrape (%v) nor named by its help", name, label, op, value, v, sortedKeys(info.values[label]))
		}
	}
}
