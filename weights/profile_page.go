package weights

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
)

// This file prepares the bytes expfmt's TextParser reads, in one pass over
// the page's lines:
//
//   - OpenMetrics is rewritten into the text format. expfmt v0.73 decodes
//     OpenMetrics by running an ABNF grammar over every line, which costs
//     ~0.6 s and ~850 MB of garbage for one vLLM page (4 MiB pages would
//     exhaust memory), and the scraper asks for OpenMetrics first. The two
//     formats differ in little: "# EOF", counter families (TYPE x counter,
//     samples x_total), _created samples, UNIT lines, exemplars and
//     timestamps in seconds.
//   - With a profile, only the lines of families the profile can read are
//     kept (see keepSet): the TextParser allocates ~30 times per sample, and
//     a vLLM page has ~350 samples of which the profile reads ~40.

// keepSet is the set of family names whose lines ParseSignals feeds to the
// TextParser. The TextParser assigns a line named n to family n, or to the
// family one suffix (_bucket, _sum, _count) shorter if that is a histogram
// or summary, and only lines named n create family n. So the families
// Extract reads (each series name, and for "x_total" also "x") come out
// exactly as from the whole page if the kept lines include, for each such
// family F, those named F, F_bucket, F_sum, F_count, and the chain of names
// F shortens to by stripping suffixes one at a time. Dropped lines only
// hold other families.
type keepSet map[string]struct{}

func profileKeepSet(p *Profile) keepSet {
	k := make(keepSet, 64)
	add := func(f string) {
		k[f] = struct{}{}
		for _, suf := range [...]string{"_bucket", "_sum", "_count"} {
			k[f+suf] = struct{}{}
		}
		for b := parentFamily(f); b != f; b = parentFamily(f) {
			k[b] = struct{}{}
			f = b
		}
	}
	for _, l := range [][]Series{p.QueueDepth, p.Running, p.KVOccupancy, p.Preemptions,
		p.PrefixQueries, p.PrefixHits, p.PrefixHitRate, p.TTFT, p.LoRAInfo} {
		for _, s := range l {
			add(s.Name)
			if len(s.Name) > len("_total") && s.Name[len(s.Name)-len("_total"):] == "_total" {
				add(s.Name[:len(s.Name)-len("_total")])
			}
		}
	}
	return k
}

// parentFamily mirrors expfmt's histogramMetricName: name less one
// _count, _sum or _bucket suffix (names no longer than the suffix keep it).
func parentFamily(name string) string {
	for _, suf := range [...]string{"_count", "_sum", "_bucket"} {
		if len(name) > len(suf) && name[len(name)-len(suf):] == suf {
			return name[:len(name)-len(suf)]
		}
	}
	return name
}

func (k keepSet) has(name []byte) bool {
	_, ok := k[string(name)]
	return ok
}

// errUnclean stops a filtered pass: the page has a line filterText cannot
// vouch for, so the whole page goes to the parser.
var errUnclean = errors.New("unclean line")

// filterText returns the lines of a text-format page that keep holds. If a
// line is one the TextParser might reject or read differently from how
// textLine reads it, filtering could hide an error or a series, so it
// returns errUnclean and the caller parses the whole page instead.
func filterText(body []byte, keep keepSet, out *bytes.Buffer) error {
	if len(body) > 0 && body[len(body)-1] != '\n' {
		return errUnclean // truncated: the parser says so
	}
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		line := body[:i]
		body = body[i+1:]
		name, clean := textLine(line)
		if !clean {
			return errUnclean
		}
		if name != nil && keep.has(name) {
			out.Write(line)
			out.WriteByte('\n')
		}
	}
	return nil
}

func isBlank(b byte) bool { return b == ' ' || b == '\t' }

func skipBlanks(l []byte, i int) int {
	for i < len(l) && isBlank(l[i]) {
		i++
	}
	return i
}

func isNameStart(b byte) bool {
	return b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' || b == ':'
}

func isNameChar(b byte) bool { return isNameStart(b) || b >= '0' && b <= '9' }

func isLabelStart(b byte) bool { return b != ':' && isNameStart(b) }

func isLabelChar(b byte) bool { return b != ':' && isNameChar(b) }

// scanName returns the end of the unquoted metric name at l[i:], i if none.
func scanName(l []byte, i int) int {
	if i >= len(l) || !isNameStart(l[i]) {
		return i
	}
	i++
	for i < len(l) && isNameChar(l[i]) {
		i++
	}
	return i
}

// textLine reads one line (without its newline) of a text-format page the
// way expfmt's TextParser does. name is the family name the line refers to
// (nil for blank lines, plain comments and HELP/TYPE lines the parser
// ignores). clean reports that the parser accepts the line on its own:
// quoted names, stray bytes, bad escapes, values or timestamps are not
// clean. What a clean line does not rule out are the parser's checks across
// lines (a second HELP or TYPE, TYPE after samples, a negative histogram
// count), which a dropped line then escapes; no engine prints such pages.
func textLine(l []byte) (name []byte, clean bool) {
	i := skipBlanks(l, 0)
	if i == len(l) {
		return nil, true
	}
	if l[i] == '#' {
		return commentLine(l, i+1)
	}
	if l[i] == '{' || l[i] == '"' {
		return nil, false // UTF-8 name syntax: leave it to the parser
	}
	j := scanName(l, i)
	if j == i {
		return nil, false
	}
	name = l[i:j]
	if j < len(l) && !isBlank(l[j]) && l[j] != '{' {
		return nil, false
	}
	j = skipBlanks(l, j)
	if j < len(l) && l[j] == '{' {
		var ok bool
		if j, ok = scanLabels(l, j); !ok {
			return nil, false
		}
		j = skipBlanks(l, j)
	}
	v := j
	for j < len(l) && !isBlank(l[j]) {
		j++
	}
	if !validFloat(l[v:j]) {
		return nil, false
	}
	if j == len(l) {
		return name, true
	}
	// A timestamp, and then nothing, not even blanks.
	t := skipBlanks(l, j)
	if _, err := strconv.ParseInt(string(l[t:]), 10, 64); err != nil {
		return nil, false
	}
	return name, true
}

func commentLine(l []byte, i int) (name []byte, clean bool) {
	i = skipBlanks(l, i)
	j := i
	for j < len(l) && !isBlank(l[j]) {
		j++
	}
	isType := string(l[i:j]) == "TYPE"
	if !isType && string(l[i:j]) != "HELP" || j == len(l) {
		return nil, true // a plain comment
	}
	i = skipBlanks(l, j)
	if i == len(l) {
		return nil, true
	}
	j = scanName(l, i)
	switch {
	case j == i:
		return nil, false
	case j == len(l):
		return nil, true // "# HELP name" alone is ignored
	case !isBlank(l[j]):
		return nil, false
	}
	name = l[i:j]
	rest := l[skipBlanks(l, j):]
	if len(rest) == 0 {
		return name, true // creates the family, sets nothing
	}
	if isType {
		return name, knownType(rest)
	}
	// HELP: only \\, \n and \" escapes.
	for k := 0; k < len(rest); k++ {
		if rest[k] == '\\' {
			if k+1 == len(rest) || (rest[k+1] != '\\' && rest[k+1] != 'n' && rest[k+1] != '"') {
				return nil, false
			}
			k++
		}
	}
	return name, true
}

// knownType reports a type the TextParser accepts (it upper-cases the rest
// of the line and looks it up). Non-ASCII spellings are left to the parser.
func knownType(t []byte) bool {
	for _, k := range [...]string{"COUNTER", "GAUGE", "SUMMARY", "UNTYPED", "HISTOGRAM", "GAUGE_HISTOGRAM", "GAUGEHISTOGRAM"} {
		if len(t) == len(k) && asciiEqualFold(t, k) {
			return true
		}
	}
	return false
}

func asciiEqualFold(b []byte, upper string) bool {
	for i := range b {
		c := b[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[i] {
			return false
		}
	}
	return true
}

// validFloat mirrors expfmt's parseFloat.
func validFloat(b []byte) bool {
	if len(b) == 0 || bytes.ContainsAny(b, "pP_") {
		return false
	}
	_, err := strconv.ParseFloat(string(b), 64)
	return err == nil
}

// maxLabelsPerSeries bounds the labels of one series; a page with more is
// a parse error. expfmt's TextParser checks each label name against all
// before it, building a map each time: 16,000 labels on one line take
// 27 s. Engines' series carry at most ~20 labels (vLLM's
// cache_config_info).
const maxLabelsPerSeries = 64

// checkLabelCounts rejects a text-format page with a series of more than
// maxLabelsPerSeries labels, before it reaches the TextParser.
func checkLabelCounts(page []byte) error {
	for len(page) > 0 {
		line := page
		if i := bytes.IndexByte(page, '\n'); i >= 0 {
			line, page = page[:i], page[i+1:]
		} else {
			page = nil
		}
		if bytes.Count(line, []byte("=")) <= maxLabelsPerSeries {
			continue
		}
		if i := skipBlanks(line, 0); i < len(line) && line[i] == '#' {
			continue // HELP text is read in linear time
		}
		// One '=' outside quotes per label pair.
		n, quoted := 0, false
		for i := 0; i < len(line); i++ {
			switch c := line[i]; {
			case quoted && c == '\\':
				i++
			case c == '"':
				quoted = !quoted
			case !quoted && c == '=':
				n++
			}
		}
		if n > maxLabelsPerSeries {
			return fmt.Errorf("a series with %d labels (at most %d): %.80q", n, maxLabelsPerSeries, line)
		}
	}
	return nil
}

// scanLabels checks the label set starting at l[i] == '{' and returns the
// index after its '}'. Quoted label names, duplicate names, __name__,
// invalid UTF-8, non-numeric le/quantile values and more than
// maxLabelsPerSeries labels are not clean.
func scanLabels(l []byte, i int) (int, bool) {
	var seen [maxLabelsPerSeries][]byte
	n := 0
	i++
	for {
		i = skipBlanks(l, i)
		if i < len(l) && l[i] == '}' {
			return i + 1, true
		}
		s := i
		if i >= len(l) || !isLabelStart(l[i]) {
			return 0, false
		}
		for i < len(l) && isLabelChar(l[i]) {
			i++
		}
		ln := l[s:i]
		if string(ln) == "__name__" || n == len(seen) {
			return 0, false
		}
		for _, o := range seen[:n] {
			if bytes.Equal(o, ln) {
				return 0, false
			}
		}
		seen[n] = ln
		n++
		i = skipBlanks(l, i)
		if i >= len(l) || l[i] != '=' {
			return 0, false
		}
		i = skipBlanks(l, i+1)
		if i >= len(l) || l[i] != '"' {
			return 0, false
		}
		i++
		vs, escaped := i, false
		for i < len(l) && l[i] != '"' {
			if l[i] == '\\' {
				if i+1 == len(l) || (l[i+1] != '\\' && l[i+1] != 'n' && l[i+1] != '"') {
					return 0, false
				}
				escaped = true
				i++
			}
			i++
		}
		if i >= len(l) {
			return 0, false
		}
		v := l[vs:i]
		i++
		if !utf8.Valid(v) {
			return 0, false
		}
		if (string(ln) == "le" || string(ln) == "quantile") && (escaped || !validFloat(v)) {
			return 0, false
		}
		i = skipBlanks(l, i)
		if i < len(l) && l[i] == ',' {
			i++
			continue
		}
		if i < len(l) && l[i] == '}' {
			return i + 1, true
		}
		return 0, false
	}
}

// omFamily is the OpenMetrics family whose descriptors or samples the
// translation is in.
type omFamily struct {
	name []byte
	typ  string // as declared, lower case; "" if none
	help []byte // a HELP line held back until the TYPE is known
}

// openMetricsToText writes body, an OpenMetrics 1.0 page, in the text
// format to out, keeping only the lines keep holds if keep is not nil. It
// returns errUnclean if keep is set and a line could not be vouched for
// (the caller then translates the page without keep). Beyond "# EOF" it
// checks what the TextParser will check; it is more lenient than the
// OpenMetrics grammar, which kvxds does not need enforced.
func openMetricsToText(body []byte, keep keepSet, out *bytes.Buffer) error {
	var eofLen int
	switch {
	case bytes.HasSuffix(body, []byte("# EOF\n")):
		eofLen = len("# EOF\n")
	case bytes.HasSuffix(body, []byte("# EOF")):
		eofLen = len("# EOF")
	default:
		return errors.New("OpenMetrics page does not end with # EOF")
	}
	if len(body) > eofLen && body[len(body)-eofLen-1] != '\n' {
		return errors.New("OpenMetrics page does not end with # EOF")
	}
	body = body[:len(body)-eofLen]
	var fam omFamily
	var scratch []byte
	emit := func(line []byte) error {
		if keep == nil {
			out.Write(line)
			out.WriteByte('\n')
			return nil
		}
		name, clean := textLine(line)
		if !clean {
			return errUnclean
		}
		if name != nil && keep.has(name) {
			out.Write(line)
			out.WriteByte('\n')
		}
		return nil
	}
	flushHelp := func() error {
		if fam.help == nil {
			return nil
		}
		h := fam.help
		fam.help = nil
		scratch = omDescriptor(scratch[:0], "HELP", fam.name, fam.typ, h)
		return emit(scratch)
	}
	for len(body) > 0 {
		i := bytes.IndexByte(body, '\n')
		line := body[:i]
		body = body[i+1:]
		if bytes.Equal(line, []byte("# EOF")) {
			return errors.New("data after # EOF")
		}
		if kind, name, rest, ok := omDescriptorLine(line); ok {
			if !bytes.Equal(name, fam.name) {
				if err := flushHelp(); err != nil {
					return err
				}
				fam = omFamily{name: name}
			}
			switch kind {
			case "HELP":
				if fam.help != nil {
					return errors.New("second HELP line for " + string(name))
				}
				fam.help = rest
			case "TYPE":
				if fam.typ != "" {
					return errors.New("second TYPE line for " + string(name))
				}
				fam.typ = string(rest)
				switch fam.typ {
				case "counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset", "unknown":
				default:
					return errors.New("unknown metric type " + strconv.Quote(fam.typ))
				}
				scratch = omDescriptor(scratch[:0], "TYPE", fam.name, fam.typ, rest)
				if err := emit(scratch); err != nil {
					return err
				}
			}
			continue // UNIT: the text format has none
		}
		if err := flushHelp(); err != nil {
			return err
		}
		if len(line) == 0 || line[0] == '#' {
			continue // not OpenMetrics; the text format ignores them
		}
		var drop bool
		scratch, drop = omSample(scratch[:0], line, &fam)
		if drop {
			continue
		}
		if err := emit(scratch); err != nil {
			return err
		}
	}
	return flushHelp()
}

// omDescriptorLine splits "# HELP name rest", "# TYPE name type" and
// "# UNIT name unit". name may be quoted (a UTF-8 name).
func omDescriptorLine(l []byte) (kind string, name, rest []byte, ok bool) {
	if len(l) < 7 || l[0] != '#' || l[1] != ' ' || l[6] != ' ' {
		return "", nil, nil, false
	}
	switch string(l[2:6]) {
	case "HELP":
		kind = "HELP"
	case "TYPE":
		kind = "TYPE"
	case "UNIT":
		kind = "UNIT"
	default:
		return "", nil, nil, false
	}
	l = l[7:]
	var end int
	if len(l) > 0 && l[0] == '"' {
		end = quotedEnd(l, 0)
		if end < 0 {
			return "", nil, nil, false
		}
	} else {
		end = scanName(l, 0)
	}
	if end == 0 {
		return "", nil, nil, false
	}
	name = l[:end]
	if end < len(l) {
		if l[end] != ' ' {
			return "", nil, nil, false
		}
		rest = l[end+1:]
	}
	return kind, name, rest, true
}

// quotedEnd returns the index after the quoted string starting at l[i],
// or -1.
func quotedEnd(l []byte, i int) int {
	for j := i + 1; j < len(l); j++ {
		switch l[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// omDescriptor writes a text-format HELP or TYPE line for an OpenMetrics
// family, renamed as Python's prometheus_client names it in the text
// format: counters x_total, info x_info; info, stateset → gauge, unknown →
// untyped.
func omDescriptor(dst []byte, kind string, name []byte, typ string, rest []byte) []byte {
	dst = append(dst, "# "...)
	dst = append(dst, kind...)
	dst = append(dst, ' ')
	suffix := ""
	switch typ {
	case "counter":
		suffix = "_total"
	case "info":
		suffix = "_info"
	}
	if len(name) > 1 && name[0] == '"' {
		dst = append(dst, name[:len(name)-1]...)
		dst = append(dst, suffix...)
		dst = append(dst, '"')
	} else {
		dst = append(dst, name...)
		dst = append(dst, suffix...)
	}
	dst = append(dst, ' ')
	if kind == "TYPE" {
		switch typ {
		case "info", "stateset":
			typ = "gauge"
		case "unknown":
			typ = "untyped"
		}
		return append(dst, typ...)
	}
	return append(dst, rest...)
}

// omSample writes the text-format form of an OpenMetrics sample line:
// without exemplar, with its timestamp in milliseconds. drop is set for
// _created samples of counters, histograms and summaries (creation times,
// not values); gauge histograms' _gcount and _gsum become _count and _sum.
// Lines it cannot take apart are copied for the TextParser to judge.
func omSample(dst, l []byte, fam *omFamily) (out []byte, drop bool) {
	end := scanName(l, 0)
	name := l[:end]
	if end > 0 && fam.name != nil && fam.name[0] != '"' && len(name) > len(fam.name) &&
		bytes.HasPrefix(name, fam.name) {
		switch suf := string(name[len(fam.name):]); {
		case suf == "_created" && (fam.typ == "counter" || fam.typ == "histogram" ||
			fam.typ == "gaugehistogram" || fam.typ == "summary"):
			return dst, true
		case fam.typ == "gaugehistogram" && (suf == "_gcount" || suf == "_gsum"):
			dst = append(dst, fam.name...)
			dst = append(dst, '_')
			dst = append(dst, suf[2:]...)
			l = l[end:]
			end = 0
		}
	}
	// Find the end of the label set, if any, honouring quotes.
	i := end
	if i < len(l) && l[i] == '{' {
		for i++; i < len(l) && l[i] != '}'; i++ {
			if l[i] == '"' {
				if i = quotedEnd(l, i); i < 0 {
					return append(dst, l...), false
				}
				i--
			}
		}
		if i == len(l) {
			return append(dst, l...), false
		}
		i++
	}
	// " value [timestamp] [# exemplar]"
	rest := l[i:]
	if len(rest) == 0 || rest[0] != ' ' {
		return append(dst, l...), false
	}
	dst = append(dst, l[:i]...)
	fields := 0
	for len(rest) > 0 && rest[0] == ' ' && fields < 2 {
		tok := rest[1:]
		if j := bytes.IndexByte(tok, ' '); j >= 0 {
			tok = tok[:j]
		}
		if string(tok) == "#" {
			break // exemplar
		}
		dst = append(dst, ' ')
		if fields == 0 {
			dst = append(dst, tok...)
		} else {
			dst = appendTimestampMs(dst, tok)
		}
		rest = rest[1+len(tok):]
		fields++
	}
	if len(rest) > 0 && !bytes.HasPrefix(rest, []byte(" # ")) {
		dst = append(dst, rest...) // left for the parser to reject
	}
	return dst, false
}

// appendTimestampMs converts an OpenMetrics timestamp (seconds, a float)
// to the text format's integer milliseconds, as expfmt does; what does not
// convert is copied, and the TextParser rejects it.
func appendTimestampMs(dst, tok []byte) []byte {
	if validFloat(tok) {
		f, _ := strconv.ParseFloat(string(tok), 64)
		if ms := math.Round(f * 1000); !math.IsNaN(ms) && !math.IsInf(ms, 0) && math.Abs(ms) < 1<<62 {
			return strconv.AppendInt(dst, int64(ms), 10)
		}
	}
	return append(dst, tok...)
}
