package geofence

import "unicode/utf8"

// isText reports whether raw, a JSON string literal with its quotes as the
// decoder read it, holds text: its bytes are UTF-8 and every \u escape of
// a surrogate is one half of a pair, high then low. encoding/json decodes
// both faults to U+FFFD without a word, which would answer a caller's id
// with another string than the one it sent; a U+FFFD sent as itself or as
// \ufffd is text like any other.
func isText(raw []byte) bool {
	if !utf8.Valid(raw) {
		return false
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // \" \\ \/ \b \f \n \r \t: skip the escaped byte
			continue
		}
		r, ok := hex4(raw, i+2)
		switch {
		case !ok:
			return false // the decoder refuses it first; never reached
		case r >= 0xDC00 && r <= 0xDFFF:
			return false // a low half without its high half
		case r >= 0xD800 && r <= 0xDBFF:
			if i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return false
			}
			if lo, ok := hex4(raw, i+8); !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 11
		default:
			i += 5
		}
	}
	return true
}

// hex4 reads the four hex digits of a \u escape at raw[i:].
func hex4(raw []byte, i int) (rune, bool) {
	if i+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[i : i+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		default:
			return 0, false
		}
	}
	return r, true
}
