//! A strict cursor over quick-xml's pull reader.
//!
//! It walks one document the way an XSD `sequence` reads it: child elements in the
//! message namespace, in schema order, no unknown elements or attributes, no text in
//! element-only content, no DOCTYPE, a bounded depth. It tracks namespace declarations
//! itself and keeps the element path, so that every error names where it happened,
//! with line and column.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use super::NAMESPACE;
use super::error::DecodeError;
use super::model::Reden;

const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// One child of a sequence: its name, whether it may repeat, whether it has attributes.
#[derive(Clone, Copy)]
pub(crate) struct Child {
    pub name: &'static str,
    pub repeats: bool,
    pub attrs: bool,
}

/// A child that appears at most once.
pub(crate) const fn one(name: &'static str) -> Child {
    Child { name, repeats: false, attrs: false }
}

/// A child that may repeat.
pub(crate) const fn many(name: &'static str) -> Child {
    Child { name, repeats: true, attrs: false }
}

impl Child {
    /// The child has attributes (read with [`Cursor::attrs`]); others may have none.
    pub(crate) const fn with_attrs(self) -> Self {
        Child { attrs: true, ..self }
    }
}

#[derive(Clone, Copy)]
struct Seg {
    name: &'static str,
    /// 1-based position among repeated siblings; 0 for a non-repeating element.
    index: u32,
}

/// An element the cursor has entered.
pub(crate) struct Open<'i> {
    /// Index of the element in the parent's child list.
    pub which: usize,
    pub start: BytesStart<'i>,
    /// Byte offset of the start tag.
    pub pos: u64,
}

/// A namespace declaration in scope: prefix (`None`: the default namespace), the
/// namespace name, and the depth of the element that declared it.
struct Binding {
    prefix: Option<String>,
    uri: String,
    /// `uri` is the message namespace (compared once, at declaration).
    ours: bool,
    depth: usize,
}

pub(crate) struct Cursor<'i> {
    src: &'i str,
    reader: Reader<&'i [u8]>,
    path: Vec<Seg>,
    /// Declarations in scope, innermost last. Kept by hand rather than with quick-xml's
    /// `NsReader`, which parses every start tag's attributes a second time.
    bindings: Vec<Binding>,
    /// Whether unprefixed elements are in the message namespace here (cached lookup).
    default_ours: bool,
    /// The element just entered was written `<x/>`: its end has been read already.
    empty: bool,
    max_depth: usize,
    pub(crate) message_id: Option<uuid::Uuid>,
}

impl<'i> Cursor<'i> {
    pub(crate) fn new(src: &'i str, max_depth: usize) -> Self {
        let mut reader = Reader::from_str(src);
        let cfg = reader.config_mut();
        cfg.expand_empty_elements = false;
        cfg.check_end_names = true;
        // White space between elements is skipped inside the reader (no event, no UTF-8
        // check of it) from the root on: [`Cursor::next_child`] turns it on and
        // [`Cursor::text`] off while it reads an element's text, which keeps every
        // character of it. The prolog and the epilogue read their white space as events.
        cfg.trim_text_start = false;
        Self {
            src,
            reader,
            path: Vec::with_capacity(8),
            bindings: Vec::new(),
            default_ours: false,
            empty: false,
            max_depth,
            message_id: None,
        }
    }

    /// The current path, optionally extended by a child element or attribute name.
    pub(crate) fn path_with(&self, extra: Option<(&str, bool)>) -> String {
        let mut s = String::new();
        let mut push = |name: &str, index: u32, attr: bool| {
            if !s.is_empty() {
                s.push('/');
            }
            if attr {
                s.push('@');
            }
            s.push_str(name);
            if index > 0 {
                s.push_str(&format!("[{index}]"));
            }
        };
        // The root is named only when it is the whole path.
        let skip = usize::from(self.path.len() > 1 || extra.is_some());
        for seg in self.path.iter().skip(skip) {
            push(seg.name, seg.index, false);
        }
        if let Some((name, attr)) = extra {
            push(name, 0, attr);
        }
        s
    }

    pub(crate) fn err(
        &self,
        reden: Reden,
        extra: Option<(&str, bool)>,
        detail: impl Into<String>,
        pos: u64,
    ) -> DecodeError {
        let mut e = DecodeError::new(reden, self.path_with(extra), detail).at(self.src, pos);
        e.message_id = self.message_id;
        e
    }

    fn xml_err(&self, e: quick_xml::Error) -> DecodeError {
        let pos = self.reader.error_position();
        self.err(Reden::MalformedXml, None, format!("not well-formed XML: {e}"), pos)
    }

    /// Records the namespace declarations of an element entered at `depth`.
    fn declare(&mut self, start: &BytesStart<'_>, depth: usize, pos: u64) -> Result<(), DecodeError> {
        let raw = start.attributes_raw();
        if !has_xmlns(raw) {
            return Ok(());
        }
        let mut at = 0;
        while let Some(a) = next_attr(raw, &mut at).map_err(|why| self.err(Reden::MalformedXml, None, why, pos))? {
            let prefix = match a.name.strip_prefix("xmlns") {
                Some("") => None,
                Some(p) if p.starts_with(':') => Some(p[1..].to_owned()),
                _ => continue,
            };
            let uri = normalize(&a)
                .map_err(|e| self.err(Reden::MalformedXml, None, format!("bad namespace declaration: {e}"), pos))?;
            let ours = uri == NAMESPACE;
            self.bindings.push(Binding { prefix, uri: uri.into_owned(), ours, depth });
        }
        self.default_ours = self.lookup(None).is_some_and(|b| b.ours);
        Ok(())
    }

    /// The namespace a prefix (or, for `None`, the default) stands for here.
    fn lookup(&self, prefix: Option<&str>) -> Option<&Binding> {
        self.bindings.iter().rev().find(|b| b.prefix.as_deref() == prefix).filter(|b| !b.uri.is_empty())
    }

    /// Checks that an element is in the message namespace.
    fn check_ns(&self, prefix: Option<&str>, local: &str, pos: u64) -> Result<(), DecodeError> {
        if prefix.is_none() && self.default_ours {
            return Ok(());
        }
        let detail = match self.lookup(prefix) {
            Some(b) if b.ours => return Ok(()),
            Some(b) => format!("element is in namespace '{}', expected '{NAMESPACE}'", b.uri),
            None if prefix.is_some() => format!("element has an undeclared prefix '{}'", prefix.unwrap_or_default()),
            None => format!("element has no namespace, expected '{NAMESPACE}'"),
        };
        Err(self.err(Reden::WrongNamespace, Some((local, false)), detail, pos))
    }

    /// Whether the reader skips white space before markup (element-only content) or
    /// reports all text (an element's text content).
    fn skip_space_between_elements(&mut self, on: bool) {
        self.reader.config_mut().trim_text_start = on;
    }

    /// Reads the prolog and enters the root element, which must be `root`.
    pub(crate) fn open_root(&mut self, root: &'static str) -> Result<(BytesStart<'i>, u64), DecodeError> {
        loop {
            let pos = self.reader.buffer_position();
            let ev = match self.reader.read_event() {
                Ok(ev) => ev,
                Err(e) => return Err(self.xml_err(e)),
            };
            let is_empty = matches!(ev, Event::Empty(_));
            match ev {
                Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if is_xml_space(&t) => {}
                Event::DocType(_) => {
                    return Err(self.err(
                        Reden::DoctypeForbidden,
                        None,
                        "a DOCTYPE is not allowed (no DTDs, no entity definitions)",
                        pos,
                    ));
                }
                Event::Start(start) | Event::Empty(start) => {
                    let local = start.local_name().into_inner().to_owned();
                    if local != root {
                        return Err(DecodeError::new(
                            Reden::WrongRoot,
                            local,
                            format!("the root element must be {root}"),
                        )
                        .at(self.src, pos));
                    }
                    self.path.push(Seg { name: root, index: 0 });
                    self.declare(&start, 1, pos)?;
                    if let Err(mut e) = self.check_ns(prefix_of(&start), root, pos) {
                        e.path = root.to_owned();
                        return Err(e);
                    }
                    self.empty = is_empty;
                    return Ok((start, pos));
                }
                Event::Eof => {
                    return Err(self.err(Reden::MalformedXml, None, "the body holds no root element", pos));
                }
                _ => {
                    return Err(self.err(Reden::MalformedXml, None, "content before the root element", pos));
                }
            }
        }
    }

    /// After the root's end: only comments, PIs and white space may follow.
    pub(crate) fn finish(&mut self) -> Result<(), DecodeError> {
        self.skip_space_between_elements(false);
        loop {
            let pos = self.reader.buffer_position();
            match self.reader.read_event().map_err(|e| self.xml_err(e))? {
                Event::Eof => return Ok(()),
                Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if is_xml_space(&t) => {}
                _ => {
                    return Err(self.err(Reden::MalformedXml, None, "content after the root element", pos));
                }
            }
        }
    }

    /// Reads the attributes of `start` into `out` (same order as `names`). Unknown
    /// attributes are an error; namespace declarations and `xsi:` attributes are ignored.
    pub(crate) fn attrs<'s, const N: usize>(
        &self,
        start: &'s BytesStart<'_>,
        names: [&'static str; N],
        pos: u64,
    ) -> Result<[Option<Cow<'s, str>>; N], DecodeError> {
        let mut seen = 0usize;
        let mut out: [Option<Cow<'s, str>>; N] = std::array::from_fn(|_| None);
        let raw = start.attributes_raw();
        if is_xml_space(raw) {
            return Ok(out);
        }
        let mut at = 0;
        while let Some(a) = next_attr(raw, &mut at).map_err(|why| self.err(Reden::MalformedXml, None, why, pos))? {
            let key = a.name;
            let local = match key.bytes().position(|c| c == b':').map(|i| (&key[..i], &key[i + 1..])) {
                None if key == "xmlns" => continue,
                None => key,
                Some(("xmlns", _)) => continue,
                Some((prefix, local)) => {
                    if self.lookup(Some(prefix)).is_some_and(|b| b.uri == XSI) {
                        continue;
                    }
                    return Err(self.err(
                        Reden::UnexpectedAttribute,
                        Some((local, true)),
                        "attribute in a foreign namespace is not allowed here",
                        pos,
                    ));
                }
            };
            // Attributes usually come in schema order: try the next expected name first.
            let guess = seen.min(N.saturating_sub(1));
            let found =
                if N > 0 && names[guess] == local { Some(guess) } else { names.iter().position(|n| *n == local) };
            seen += 1;
            let Some(i) = found else {
                return Err(self.err(
                    Reden::UnexpectedAttribute,
                    Some((local, true)),
                    format!("unknown attribute (allowed: {})", list(&names)),
                    pos,
                ));
            };
            if out[i].is_some() {
                return Err(self.err(Reden::MalformedXml, Some((names[i], true)), "attribute appears twice", pos));
            }
            let value = normalize(&a).map_err(|e| {
                self.err(Reden::MalformedXml, Some((names[i], true)), format!("bad attribute value: {e}"), pos)
            })?;
            out[i] = Some(value);
        }
        Ok(out)
    }

    /// Takes a required attribute from `attrs` and parses it.
    pub(crate) fn req<T>(
        &self,
        value: Option<Cow<'_, str>>,
        name: &'static str,
        pos: u64,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<T, DecodeError> {
        let v = value.ok_or_else(|| {
            self.err(Reden::MissingAttribute, Some((name, true)), "required attribute is missing", pos)
        })?;
        self.parse(&v, Some((name, true)), pos, parse)
    }

    /// Parses an optional attribute.
    pub(crate) fn opt<T>(
        &self,
        value: Option<Cow<'_, str>>,
        name: &'static str,
        pos: u64,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<Option<T>, DecodeError> {
        value.map(|v| self.parse(&v, Some((name, true)), pos, parse)).transpose()
    }

    /// Runs a value parser; on failure names the value and the path.
    pub(crate) fn parse<T>(
        &self,
        v: &str,
        extra: Option<(&str, bool)>,
        pos: u64,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<T, DecodeError> {
        parse(v).map_err(|why| self.err(Reden::InvalidValue, extra, format!("'{}' {why}", clip(v)), pos))
    }

    /// Reads the next child element of the current element, or `None` at its end.
    /// Enforces the order and repetition of `children`; `last` carries the index of the
    /// previous child between calls (start with `None`).
    pub(crate) fn next_child(
        &mut self,
        children: &[Child],
        last: &mut Option<(usize, u32)>,
    ) -> Result<Option<Open<'i>>, DecodeError> {
        if self.empty {
            // `<x/>`: no children, and its end is already read.
            self.empty = false;
            return Ok(None);
        }
        self.skip_space_between_elements(true);
        loop {
            let before = self.reader.buffer_position();
            let ev = match self.reader.read_event() {
                Ok(ev) => ev,
                Err(e) => return Err(self.xml_err(e)),
            };
            // Where the event begins: past the white space the reader skipped.
            let pos = after_space(self.src, before);
            let is_empty = matches!(ev, Event::Empty(_));
            match ev {
                Event::Start(start) | Event::Empty(start) => {
                    // One search for the ':' gives both parts of the name.
                    let (local, prefix) = start.name().decompose();
                    let (local, prefix) = (local.into_inner(), prefix.map(|p| p.into_inner()));
                    // In schema order the next child is usually the last one again or the
                    // one after it: look there first.
                    let from = last.map_or(0, |(w, _)| w);
                    let which = children[from.min(children.len())..]
                        .iter()
                        .take(2)
                        .position(|c| c.name == local)
                        .map(|i| from + i)
                        .or_else(|| children.iter().position(|c| c.name == local));
                    let Some(which) = which else {
                        let allowed: Vec<&str> = children.iter().map(|c| c.name).collect();
                        return Err(self.err(
                            Reden::UnexpectedElement,
                            Some((local, false)),
                            if allowed.is_empty() {
                                "no child elements are allowed here".to_owned()
                            } else {
                                format!("unknown element (allowed here: {})", allowed.join(", "))
                            },
                            pos,
                        ));
                    };
                    let child = children[which];
                    let has_attrs = !is_xml_space(start.attributes_raw());
                    if has_attrs {
                        self.declare(&start, self.path.len() + 1, pos)?;
                    }
                    self.check_ns(prefix, child.name, pos)?;
                    let index = match *last {
                        Some((prev, n)) if prev == which => {
                            if !child.repeats {
                                return Err(self.err(
                                    Reden::UnexpectedElement,
                                    Some((child.name, false)),
                                    "element may appear only once",
                                    pos,
                                ));
                            }
                            n + 1
                        }
                        Some((prev, _)) if prev > which => {
                            return Err(self.err(
                                Reden::UnexpectedElement,
                                Some((child.name, false)),
                                format!("element is out of order: it must come before {}", children[prev].name),
                                pos,
                            ));
                        }
                        _ => 1,
                    };
                    *last = Some((which, index));
                    if self.path.len() >= self.max_depth {
                        return Err(self.err(
                            Reden::TooDeep,
                            Some((child.name, false)),
                            format!("elements nest deeper than {} levels", self.max_depth),
                            pos,
                        ));
                    }
                    self.path.push(Seg { name: child.name, index: if child.repeats { index } else { 0 } });
                    if has_attrs && !child.attrs {
                        // Only namespace declarations (and xsi:) may stand here.
                        self.attrs(&start, [], pos)?;
                    }
                    self.empty = is_empty;
                    return Ok(Some(Open { which, start, pos }));
                }
                // The caller checks for missing children, then calls `close`.
                Event::End(_) => return Ok(None),
                Event::Text(t) if is_xml_space(&t) => {}
                Event::Comment(_) | Event::PI(_) => {}
                Event::DocType(_) => {
                    return Err(self.err(Reden::DoctypeForbidden, None, "a DOCTYPE is not allowed", pos));
                }
                Event::Eof => {
                    return Err(self.err(Reden::MalformedXml, None, "the document ends inside this element", pos));
                }
                _ => {
                    return Err(self.err(
                        Reden::UnexpectedElement,
                        None,
                        "text is not allowed here, only elements",
                        pos,
                    ));
                }
            }
        }
    }

    /// Reads the text content of the element just entered and leaves it.
    pub(crate) fn text(&mut self) -> Result<(Cow<'i, str>, u64), DecodeError> {
        if self.empty {
            self.empty = false;
            return Ok((Cow::Borrowed(""), self.reader.buffer_position()));
        }
        let mut acc: Option<Cow<'i, str>> = None;
        let text_pos = self.reader.buffer_position();
        self.skip_space_between_elements(false);
        loop {
            let pos = self.reader.buffer_position();
            let ev = match self.reader.read_event() {
                Ok(ev) => ev,
                Err(e) => return Err(self.xml_err(e)),
            };
            let piece: Cow<'i, str> = match ev {
                Event::Text(t) => t.xml10_content(),
                Event::CData(c) => c.xml10_content(),
                Event::GeneralRef(r) => match r.resolve_char_ref() {
                    Ok(Some(c)) => Cow::Owned(c.to_string()),
                    Ok(None) => match quick_xml::escape::resolve_predefined_entity(&r) {
                        Some(s) => Cow::Borrowed(s),
                        None => {
                            return Err(self.err(
                                Reden::MalformedXml,
                                None,
                                format!("unknown entity '&{};'", clip(&r)),
                                pos,
                            ));
                        }
                    },
                    Err(e) => {
                        return Err(self.err(Reden::MalformedXml, None, format!("bad character reference: {e}"), pos));
                    }
                },
                Event::Comment(_) | Event::PI(_) => continue,
                Event::End(_) => return Ok((acc.unwrap_or(Cow::Borrowed("")), text_pos)),
                Event::Start(s) | Event::Empty(s) => {
                    let local = s.local_name().into_inner().to_owned();
                    return Err(self.err(
                        Reden::UnexpectedElement,
                        Some((&local, false)),
                        "this element holds text only",
                        pos,
                    ));
                }
                Event::Eof => {
                    return Err(self.err(Reden::MalformedXml, None, "the document ends inside this element", pos));
                }
                _ => {
                    return Err(self.err(Reden::MalformedXml, None, "unexpected markup in text", pos));
                }
            };
            acc = Some(match acc {
                None => piece,
                Some(prev) => Cow::Owned(prev.into_owned() + &piece),
            });
        }
    }

    /// Reads a text-only element, parses it and leaves it; errors name the element.
    pub(crate) fn value<T>(&mut self, parse: impl FnOnce(&str) -> Result<T, &'static str>) -> Result<T, DecodeError> {
        let (t, pos) = self.text()?;
        let r = self.parse(&t, None, pos, parse);
        self.close();
        r
    }

    /// Reads a text-only element as a string and leaves it.
    pub(crate) fn string(
        &mut self,
        check: impl FnOnce(&str) -> Result<(), &'static str>,
    ) -> Result<String, DecodeError> {
        self.value(|t| check(t).map(|()| t.to_owned()))
    }

    /// Reads the end of an element that has no content, and leaves it.
    pub(crate) fn expect_end(&mut self) -> Result<(), DecodeError> {
        let mut last = None;
        match self.next_child(&[], &mut last)? {
            None => {
                self.close();
                Ok(())
            }
            // An empty child list matches no element: `next_child` has already failed.
            Some(open) => Err(self.err(Reden::UnexpectedElement, None, "no child elements are allowed here", open.pos)),
        }
    }

    /// Reports a required child that did not appear (call before `close`).
    pub(crate) fn missing(&self, name: &'static str) -> DecodeError {
        self.err(
            Reden::MissingElement,
            Some((name, false)),
            "required element is missing",
            self.reader.buffer_position(),
        )
    }

    /// Leaves the current element after its end tag was read.
    pub(crate) fn close(&mut self) {
        let depth = self.path.len();
        if self.bindings.last().is_some_and(|b| b.depth >= depth) {
            while self.bindings.last().is_some_and(|b| b.depth >= depth) {
                self.bindings.pop();
            }
            self.default_ours = self.lookup(None).is_some_and(|b| b.ours);
        }
        self.path.pop();
    }
}

/// The first position from `pos` on that is not XML white space.
fn after_space(src: &str, pos: u64) -> u64 {
    let b = src.as_bytes();
    let mut p = usize::try_from(pos).unwrap_or(b.len()).min(b.len());
    while p < b.len() && is_xml_ws(b[p]) {
        p += 1;
    }
    p as u64
}

/// The namespace prefix of an element's name, if it has one.
fn prefix_of<'a>(start: &'a BytesStart<'_>) -> Option<&'a str> {
    start.name().prefix().map(|p| p.into_inner())
}

/// One attribute of raw attribute text.
struct RawAttr<'a> {
    name: &'a str,
    value: &'a str,
    /// The value has no `&`, tab, CR or LF: it needs no normalizing.
    plain: bool,
}

/// Reads the next `name="value"` of raw attribute text from `*at`, strictly: white
/// space before each attribute, `=`, a quoted value without `<`. The value is read in
/// one pass that also notes whether it needs normalizing.
fn next_attr<'a>(raw: &'a str, at: &mut usize) -> Result<Option<RawAttr<'a>>, &'static str> {
    let b = raw.as_bytes();
    let mut p = *at;
    while p < b.len() && is_xml_ws(b[p]) {
        p += 1;
    }
    if p == b.len() {
        *at = p;
        return Ok(None);
    }
    if p == *at {
        return Err("attributes must be separated by white space");
    }
    let start = p;
    while p < b.len() && !is_xml_ws(b[p]) && b[p] != b'=' {
        p += 1;
    }
    let name = &raw[start..p];
    while p < b.len() && is_xml_ws(b[p]) {
        p += 1;
    }
    if name.is_empty() || p == b.len() || b[p] != b'=' {
        return Err("an attribute must be written name=\"value\"");
    }
    p += 1;
    while p < b.len() && is_xml_ws(b[p]) {
        p += 1;
    }
    let quote = match b.get(p) {
        Some(&q @ (b'"' | b'\'')) => q,
        _ => return Err("an attribute value must be quoted"),
    };
    let first = p + 1;
    let (mut end, mut plain, mut lt) = (first, true, false);
    loop {
        match b.get(end) {
            None => return Err("an attribute value is not closed"),
            Some(&c) if c == quote => break,
            Some(b'<') => lt = true,
            Some(b'&' | b'\t' | b'\r' | b'\n') => plain = false,
            Some(_) => {}
        }
        end += 1;
    }
    if lt {
        return Err("'<' is not allowed in an attribute value");
    }
    *at = end + 1;
    Ok(Some(RawAttr { name, value: &raw[first..end], plain }))
}

/// An attribute value with entities resolved and white space normalized (XML 1.0
/// section 3.3.3); borrowed when there is nothing to change.
fn normalize<'a>(a: &RawAttr<'a>) -> Result<Cow<'a, str>, quick_xml::Error> {
    if a.plain {
        return Ok(Cow::Borrowed(a.value));
    }
    let attr =
        quick_xml::events::attributes::Attribute { key: quick_xml::name::QName(a.name), value: Cow::Borrowed(a.value) };
    attr.normalized_value(quick_xml::XmlVersion::Implicit1_0)
}

/// Whether a byte is XML white space (space, tab, CR, LF; not other Unicode spaces).
fn is_xml_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// Whether text is only XML white space.
fn is_xml_space(t: &str) -> bool {
    t.bytes().all(is_xml_ws)
}

/// Whether raw attribute text may declare a namespace (a vectorised search: most start
/// tags have no `xmlns` in their attributes at all).
fn has_xmlns(raw: &str) -> bool {
    let b = raw.as_bytes();
    memchr::memchr_iter(b'x', b).any(|i| b[i..].starts_with(b"xmlns"))
}

fn list(names: &[&str]) -> String {
    names.iter().map(|n| format!("@{n}")).collect::<Vec<_>>().join(", ")
}

/// A value shortened for an error message.
fn clip(v: &str) -> String {
    let mut s: String = v.chars().take(40).collect();
    if v.chars().count() > 40 {
        s.push('…');
    }
    s
}
