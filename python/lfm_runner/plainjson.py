"""JSON for the runner's own files, without importing `json`.

`import json` brings `re` and `enum` (~7 ms), paid by every `lfm call` before the user's code
runs, and left in the call's `sys.modules` although the call never asked for them. The
runner's request and outcome are small documents of plain values, so it reads and writes them
here. `dumps` writes exactly what `json.dumps` writes with its defaults, for plain values
only (exact dict, list, tuple, str, int, float, bool, None; dict keys str), and at most
`MOST_ITEMS` of them: anything else raises `NotPlain`, and the caller turns to `json`, which
is faster on large values (its encoder is C).
"""

MOST_ITEMS = 10_000


class NotPlain(TypeError):
    """The value has something only `json` renders (or renders faster)."""


_ESCAPES = {i: "\\u%04x" % i for i in range(0x20)}
_ESCAPES.update({ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r"})
_ESCAPES.update({ord("\t"): "\\t", ord("\b"): "\\b", ord("\f"): "\\f"})


def _string(text):
    escaped = text.translate(_ESCAPES)
    if not escaped.isascii():
        escaped = "".join(c if c < "\x80" else _non_ascii(c) for c in escaped)
    return '"' + escaped + '"'


def _non_ascii(char):
    code = ord(char)
    if code < 0x10000:
        return "\\u%04x" % code
    code -= 0x10000
    return "\\u%04x\\u%04x" % (0xD800 | (code >> 10), 0xDC00 | (code & 0x3FF))


def _float(number):
    if number != number:
        return "NaN"
    if number in (float("inf"), float("-inf")):
        return "Infinity" if number > 0 else "-Infinity"
    return float.__repr__(number)


def dumps(value):
    """The text `json.dumps(value)` gives; `NotPlain` for a value `json` must render."""
    budget = [MOST_ITEMS]
    parts = []
    try:
        _write(value, parts, budget)
    except RecursionError:  # a circular value, or one nested deeper than Python recurses
        raise NotPlain("nested too deeply") from None
    return "".join(parts)


def _write(value, parts, budget):
    budget[0] -= 1
    if budget[0] < 0:
        raise NotPlain("more items than the runner writes itself")
    kind = type(value)
    if kind is str:
        parts.append(_string(value))
    elif value is None:
        parts.append("null")
    elif kind is bool:
        parts.append("true" if value else "false")
    elif kind is int:
        parts.append(int.__repr__(value))
    elif kind is float:
        parts.append(_float(value))
    elif kind is list or kind is tuple:
        _write_list(value, parts, budget)
    elif kind is dict:
        _write_dict(value, parts, budget)
    else:
        raise NotPlain(f"a {kind.__name__}")


def _write_list(items, parts, budget):
    parts.append("[")
    for index, item in enumerate(items):
        if index:
            parts.append(", ")
        _write(item, parts, budget)
    parts.append("]")


def _write_dict(mapping, parts, budget):
    parts.append("{")
    for index, (key, item) in enumerate(mapping.items()):
        if type(key) is not str:
            raise NotPlain("a key that is not a str")
        if index:
            parts.append(", ")
        parts.append(_string(key))
        parts.append(": ")
        _write(item, parts, budget)
    parts.append("}")


class _Reader:
    """A recursive-descent reader of one JSON document (RFC 8259, plus the NaN and Infinity
    that `json` writes). It reads what lfm writes, so it is lenient where that costs time:
    control characters in strings pass, and numbers are what `int` or `float` accept."""

    def __init__(self, text):
        self.text = text
        self.at = 0

    def fail(self, what):
        line = self.text.count("\n", 0, self.at) + 1
        raise ValueError(f"{what} at line {line}, character {self.at}")

    def skip_space(self):
        text, at = self.text, self.at
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        self.at = at

    def value(self):
        self.skip_space()
        if self.at >= len(self.text):
            self.fail("a value expected")
        first = self.text[self.at]
        if first == "{":
            return self.object()
        if first == "[":
            return self.array()
        if first == '"':
            return self.string()
        for word, meaning in _WORDS:
            if self.text.startswith(word, self.at):
                self.at += len(word)
                return meaning
        return self.number()

    def object(self):
        self.at += 1
        result = {}
        self.skip_space()
        if self.text.startswith("}", self.at):
            self.at += 1
            return result
        while True:
            self.skip_space()
            if not self.text.startswith('"', self.at):
                self.fail("a key expected")
            key = self.string()
            self.skip_space()
            if not self.text.startswith(":", self.at):
                self.fail("':' expected")
            self.at += 1
            result[key] = self.value()
            if self.next_or_end("}"):
                return result

    def array(self):
        self.at += 1
        result = []
        self.skip_space()
        if self.text.startswith("]", self.at):
            self.at += 1
            return result
        while True:
            result.append(self.value())
            if self.next_or_end("]"):
                return result

    def next_or_end(self, end):
        """After an item: True at the container's end, False at a comma."""
        self.skip_space()
        if self.text.startswith(end, self.at):
            self.at += 1
            return True
        if self.text.startswith(",", self.at):
            self.at += 1
            return False
        self.fail(f"',' or '{end}' expected")

    def string(self):
        text = self.text
        start = self.at + 1
        end = text.find('"', start)
        if end < 0:
            self.fail("an unterminated string")
        if text.find("\\", start, end) < 0:
            self.at = end + 1
            return text[start:end]
        return self.escaped_string(start)

    def escaped_string(self, at):
        text, pieces = self.text, []
        while True:
            quote, backslash = text.find('"', at), text.find("\\", at)
            if quote < 0:
                self.fail("an unterminated string")
            if backslash < 0 or quote < backslash:
                pieces.append(text[at:quote])
                self.at = quote + 1
                return "".join(pieces)
            pieces.append(text[at:backslash])
            self.at = backslash
            char, at = self.escape(backslash + 1)
            pieces.append(char)

    def escape(self, at):
        """(the character, where the text goes on) of the escape whose letter is at `at`."""
        letter = self.text[at : at + 1]
        if letter in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[letter], at + 1
        if letter != "u":
            self.fail("an unknown escape")
        code = self.hex4(at + 1)
        if 0xD800 <= code < 0xDC00 and self.text.startswith("\\u", at + 5):
            low = self.hex4(at + 7)
            if 0xDC00 <= low < 0xE000:
                return chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)), at + 11
        return chr(code), at + 5

    def hex4(self, at):
        digits = self.text[at : at + 4]
        if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            self.fail("a \\u escape without four hex digits")
        return int(digits, 16)

    def number(self):
        text, start, at = self.text, self.at, self.at
        while at < len(text) and text[at] in "+-0123456789.eE":
            at += 1
        chunk = text[start:at]
        self.at = at
        if not chunk:
            self.fail("a value expected")
        try:
            if any(c in ".eE" for c in chunk):
                return float(chunk)
            return int(chunk)
        except ValueError:
            self.fail(f"not a number: {chunk!r}")


_WORDS = (
    ("null", None),
    ("true", True),
    ("false", False),
    ("NaN", float("nan")),
    ("Infinity", float("inf")),
    ("-Infinity", float("-inf")),
)
_SIMPLE_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}


def loads(text):
    """The value of one JSON document; ValueError naming the line of what is wrong."""
    reader = _Reader(text)
    value = reader.value()
    reader.skip_space()
    if reader.at != len(text):
        reader.fail("text after the document")
    return value
