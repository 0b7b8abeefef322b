package tiles

import (
	"cmp"
	"fmt"
	"strings"
)

// OrderKey is one key of a layer's order_by: a column, ascending unless
// Desc. Nulls sort last either way.
type OrderKey struct {
	Column string
	Desc   bool
}

// ParseOrderKey parses one order_by entry: "column", "column asc" or
// "column desc" (the keyword in any case, after the last space). The
// column is a name, quoted as one identifier when the query is rendered;
// it is never SQL text.
func ParseOrderKey(s string) (OrderKey, error) {
	s = strings.TrimSpace(s)
	k := OrderKey{Column: s}
	if i := strings.LastIndexByte(s, ' '); i >= 0 {
		switch strings.ToLower(s[i+1:]) {
		case "desc":
			k = OrderKey{Column: strings.TrimSpace(s[:i]), Desc: true}
		case "asc":
			k = OrderKey{Column: strings.TrimSpace(s[:i])}
		}
	}
	if k.Column == "" {
		return OrderKey{}, fmt.Errorf("order_by entry %q names no column", s)
	}
	if strings.ContainsRune(k.Column, 0) {
		return OrderKey{}, fmt.Errorf("order_by entry %q: a column name cannot hold NUL", s)
	}
	return k, nil
}

// orderKeys parses the layer's order_by, defaulting to its id column, and
// appends the id column as the last key when it is missing, so that the
// order is total (ids are unique) and a capped tile keeps the same
// features on every render.
func (l *Layer) orderKeys() ([]OrderKey, error) {
	var keys []OrderKey
	hasID := false
	for _, s := range l.OrderBy {
		k, err := ParseOrderKey(s)
		if err != nil {
			return nil, err
		}
		hasID = hasID || (!l.WithoutID && k.Column == l.IDColumn)
		keys = append(keys, k)
	}
	if !l.WithoutID && !hasID {
		keys = append(keys, OrderKey{Column: l.IDColumn})
	}
	return keys, nil
}

// CanonicalOrderBy is entries, an order_by of the layer, in the one form
// that names its order: each key "column" or "column desc" (the keyword's
// case, "asc" and spaces dropped; "column asc" when the column's own name
// ends as a keyword, so the form reads back as the same key), nothing
// after the id column (ids are
// unique, so later keys order nothing), and the id column ascending — the
// key every order of a layer with ids ends with — left out at the end; nil
// for the id order alone. Two lists order the layer's features alike when
// their forms are equal. Entries that do not parse are returned as they
// are.
func (l *Layer) CanonicalOrderBy(entries []string) []string {
	var out []string
	id := cmp.Or(l.IDColumn, "id") // the default withDefaults gives it
	for _, s := range entries {
		k, err := ParseOrderKey(s)
		if err != nil {
			return entries
		}
		isID := !l.WithoutID && k.Column == id
		if isID && !k.Desc {
			break
		}
		e := k.Column
		switch lower := strings.ToLower(e); {
		case k.Desc:
			e += " desc"
		case strings.HasSuffix(lower, " asc") || strings.HasSuffix(lower, " desc"):
			e += " asc" // the name ends as a keyword: say it is the column
		}
		out = append(out, e)
		if isID {
			break
		}
	}
	return out
}

// CarriedOrderBySQL is the layer's order (OrderBy, the id last) as an
// ORDER BY list over the relation alias, nulls last, by the names the
// layer's columns are carried under (CarriedColumns), unquoted: the order
// of rows that carry them so; "" when the layer has neither ids nor
// order_by.
func (l *Layer) CarriedOrderBySQL(alias string) string {
	return orderSQLBy(alias, l.order, l.carriedAs())
}

// orderSQLBy renders keys as an ORDER BY list over the relation alias,
// each column written as name returns it, nulls last.
func orderSQLBy(alias string, keys []OrderKey, name func(string) string) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		dir := " ASC"
		if k.Desc {
			dir = " DESC"
		}
		parts[i] = alias + "." + name(k.Column) + dir + " NULLS LAST"
	}
	return strings.Join(parts, ", ")
}
