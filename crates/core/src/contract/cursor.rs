//! A strict cursor over quick-xml's pull reader.
//!
//! It walks one document the way an XSD `sequence` reads it: child elements in the
//! message namespace, in schema order, no unknown elements or attributes, no text in
//! element-only content, no DOCTYPE, a bounded depth. It tracks namespace declarations
//! itself and keeps the element path, so that every error names where it happened,
//! with line and column.
//!
//! Characters XML 1.0 does not allow (see `chars`) are found by one scan of the whole
//! text when the cursor is made; only a body that has one pays for more. The reason
//! code follows what the codes mean (docs/contract.md, "Reden"): such a character in an
//! element's text or in an attribute value is `invalid-value` (the value is outside
//! `xs:string`, whose value space is XML's `Char`s; the error names the value and the
//! character's line and column); anywhere else (a name, a comment, a PI, between
//! elements) the document is not well-formed: `malformed-xml`. Character references
//! count as the character they stand for (`&#1;`, `&#xFFFF;`, and `&#0;` or a
//! surrogate's number, which stand for no character at all). Whatever the place, a
//! body with such a character is never accepted.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::reader::Reader;

use super::NAMESPACE;
use super::chars::{describe, first_forbidden, is_xml_char};
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
    /// Byte offset of the first character XML does not allow, [`NONE`] when there is none.
    bad: u64,
    pub(crate) message_id: Option<uuid::Uuid>,
}

/// `Cursor::bad` of a text that holds only characters XML allows.
const NONE: u64 = u64::MAX;

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
            bad: first_forbidden(src).map_or(NONE, |i| i as u64),
            message_id: None,
        }
    }

    /// The character XML does not allow, at `self.bad`.
    fn bad_char(&self) -> char {
        self.src.get(self.bad as usize..).and_then(|s| s.chars().next()).unwrap_or('\0')
    }

    /// Whether the event just read holds the forbidden character (one comparison: the
    /// reader is past it; never true for a body without one).
    #[inline(always)]
    fn passed_bad(&self) -> bool {
        self.bad < self.reader.buffer_position()
    }

    /// The event just read, from byte `from` on, holds the forbidden character (see
    /// `passed_bad`): the error, or `Ok` for a start tag that has it in an attribute
    /// value, which `declare` (a namespace declaration) or `check_raw_attrs` (once the
    /// element is on the path) reports, naming the attribute.
    /// `in_text`: the event is read as an element's text content. The event is told
    /// apart by its text, which keeps the event itself out of this cold path.
    #[cold]
    #[inline(never)]
    fn bad_event(&self, from: u64, in_text: bool) -> Result<(), DecodeError> {
        let from = usize::try_from(after_space(self.src, from)).unwrap_or(usize::MAX);
        let end = usize::try_from(self.reader.buffer_position()).unwrap_or(usize::MAX);
        let raw = self.src.get(from..end).unwrap_or_default();
        let value = if raw.starts_with("<![CDATA[") {
            in_text
        } else if raw.starts_with(['&', '<']) {
            // A start tag: is it in one of its attribute values?
            if let Some(tag) = raw.strip_prefix('<').filter(|t| !t.starts_with(['/', '!', '?'])) {
                let name_end = tag.find([' ', '\t', '\n', '\r', '/', '>']).unwrap_or(tag.len());
                let attrs = tag[name_end..].trim_end_matches('>').trim_end_matches('/');
                if self.bad_attr(attrs).is_some() {
                    return Ok(());
                }
            }
            false
        } else {
            in_text
        };
        Err(if value { self.bad_in_value(None) } else { self.bad_in_markup() })
    }

    /// The name of the attribute of raw attribute text whose value holds the forbidden
    /// character, if one does.
    fn bad_attr<'a>(&self, raw: &'a str) -> Option<&'a str> {
        let mut at = 0;
        while let Ok(Some(a)) = next_attr(raw, &mut at) {
            let from = self.offset_of(a.value);
            if (from..from + a.value.len() as u64).contains(&self.bad) {
                return Some(a.name);
            }
        }
        None
    }

    /// The error when one of the attribute values of raw attribute text holds the
    /// forbidden character (named by its local name, or `xmlns:…`/`xsi:…`); called only
    /// for a body that has one.
    #[cold]
    #[inline(never)]
    fn check_raw_attrs(&self, raw: &str) -> Result<(), DecodeError> {
        let from = self.offset_of(raw);
        if !(from..from + raw.len() as u64).contains(&self.bad) {
            return Ok(());
        }
        match self.bad_attr(raw) {
            Some(name) => {
                let name = match name.split_once(':') {
                    Some((prefix, local)) if prefix != "xmlns" && prefix != "xsi" => local,
                    _ => name,
                };
                Err(self.bad_in_value(Some(name)))
            }
            None => Err(self.bad_in_markup()),
        }
    }

    /// The error for a forbidden character in namespace declaration `name` of an element
    /// entered at `depth` (which `declare` reads before the element is on the path).
    #[cold]
    #[inline(never)]
    fn bad_declaration(&self, start: &BytesStart<'_>, name: &str, depth: usize) -> DecodeError {
        let mut e = self.bad_in_value(Some(name));
        if depth > self.path.len() {
            e.path = format!("{}/@{name}", self.path_with(Some((start.local_name().into_inner(), false))));
        }
        e
    }

    /// The error for a forbidden character outside any value: not well-formed XML.
    fn bad_in_markup(&self) -> DecodeError {
        let detail = format!(
            "not well-formed XML: {} is a character XML 1.0 does not allow (here outside any text or attribute value)",
            describe(self.bad_char())
        );
        self.err(Reden::MalformedXml, None, detail, self.bad)
    }

    /// The error for a forbidden character in the current element's text or in
    /// attribute `attr`.
    fn bad_in_value(&self, attr: Option<&str>) -> DecodeError {
        let detail = format!("holds {}, a character XML 1.0 does not allow", describe(self.bad_char()));
        self.err(Reden::InvalidValue, attr.map(|a| (a, true)), detail, self.bad)
    }

    /// Where a slice of the text begins in it.
    fn offset_of(&self, part: &str) -> u64 {
        let at = (part.as_ptr() as usize).wrapping_sub(self.src.as_ptr() as usize);
        debug_assert!(at <= self.src.len(), "not a slice of the text");
        at as u64
    }

    /// An ignored attribute (`xsi:…`) whose value has a reference: it must stand for a
    /// character XML allows.
    #[cold]
    #[inline(never)]
    fn check_ignored(&self, name: &str, value: &str, pos: u64) -> Result<(), DecodeError> {
        normalize(name, value, false)
            .map(drop)
            .map_err(|e| self.err(attr_reden(&e), Some((name, true)), format!("bad attribute value: {e}"), pos))
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
            if self.bad != NONE {
                let from = self.offset_of(a.value);
                if (from..from + a.value.len() as u64).contains(&self.bad) {
                    return Err(self.bad_declaration(start, a.name, depth));
                }
            }
            let uri = normalize(a.name, a.value, a.plain)
                .map_err(|e| self.err(attr_reden(&e), None, format!("bad namespace declaration: {e}"), pos))?;
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
            if self.passed_bad() {
                self.bad_event(pos, false)?;
            }
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
                    if self.passed_bad() {
                        self.check_raw_attrs(start.attributes_raw())?;
                    }
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
        // The last guard: a forbidden character the reading passed without reporting
        // (in a value the contract ignores, say) still makes the body unacceptable.
        if self.passed_bad() {
            return Err(self.bad_in_markup());
        }
        loop {
            let pos = self.reader.buffer_position();
            let ev = self.reader.read_event().map_err(|e| self.xml_err(e))?;
            if self.passed_bad() {
                self.bad_event(pos, false)?;
            }
            match ev {
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
        // A forbidden character in a value was reported when the element was entered.
        let mut at = 0;
        while let Some(a) = next_attr(raw, &mut at).map_err(|why| self.err(Reden::MalformedXml, None, why, pos))? {
            let key = a.name;
            let local = match key.bytes().position(|c| c == b':').map(|i| (&key[..i], &key[i + 1..])) {
                // Namespace declarations were checked by `declare`.
                None if key == "xmlns" => continue,
                None => key,
                Some(("xmlns", _)) => continue,
                Some((prefix, local)) => {
                    if self.lookup(Some(prefix)).is_some_and(|b| b.uri == XSI) {
                        // Ignored, but its references must still stand for XML characters.
                        if !a.plain {
                            self.check_ignored(key, a.value, pos)?;
                        }
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
            let value = normalize(key, a.value, a.plain).map_err(|e| {
                self.err(attr_reden(&e), Some((names[i], true)), format!("bad attribute value: {e}"), pos)
            })?;
            out[i] = Some(value);
        }
        Ok(out)
    }

    /// The value of an unprefixed attribute `name` of `start`, read leniently (no
    /// other attribute is judged) and only when it needs no normalizing: for what must
    /// be known before the strict reading (the Vraag's contract version).
    pub(crate) fn plain_attr<'s>(&self, start: &'s BytesStart<'_>, name: &str) -> Option<&'s str> {
        let raw = start.attributes_raw();
        let mut at = 0;
        while let Ok(Some(a)) = next_attr(raw, &mut at) {
            if a.name == name {
                return a.plain.then_some(a.value);
            }
        }
        None
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
            if self.passed_bad() {
                self.bad_event(before, false)?;
            }
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
                    if self.passed_bad() {
                        // In one of its attribute values (`bad_event`): named now that
                        // the path holds the element.
                        self.check_raw_attrs(start.attributes_raw())?;
                    }
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
            if self.passed_bad() {
                self.bad_event(pos, true)?;
            }
            let piece: Cow<'i, str> = match ev {
                Event::Text(t) => t.xml10_content(),
                Event::CData(c) => c.xml10_content(),
                Event::GeneralRef(r) => match r.resolve_char_ref() {
                    Ok(Some(c)) if !is_xml_char(c) => {
                        let why = format!(
                            "holds {} (as the character reference '&{};'), a character XML 1.0 does not allow",
                            describe(c),
                            clip(&r)
                        );
                        return Err(self.err(Reden::InvalidValue, None, why, pos));
                    }
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
                        let why = match forbidden_ref(&e) {
                            Some(n) => format!(
                                "holds the character reference '&{};' (U+{n:04X}), which stands for no character XML 1.0 allows",
                                clip(&r)
                            ),
                            None => format!("bad character reference: {e}"),
                        };
                        return Err(self.err(attr_reden(&e), None, why, pos));
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
/// section 3.3.3); borrowed when there is nothing to change. A character reference must
/// stand for a character XML allows (raw characters are checked apart, see `Cursor`):
/// one that does not is the error quick-xml gives for `&#0;`.
/// Takes the attribute's parts (not a `&RawAttr`), so that the attribute loops keep
/// them in registers.
fn normalize<'a>(name: &'a str, value: &'a str, plain: bool) -> Result<Cow<'a, str>, quick_xml::Error> {
    if plain {
        return Ok(Cow::Borrowed(value));
    }
    normalize_slow(name, value)
}

#[inline(never)]
fn normalize_slow<'a>(name: &'a str, value: &'a str) -> Result<Cow<'a, str>, quick_xml::Error> {
    use quick_xml::escape::{EscapeError, ParseCharRefError};
    let attr =
        quick_xml::events::attributes::Attribute { key: quick_xml::name::QName(name), value: Cow::Borrowed(value) };
    let value = attr.normalized_value(quick_xml::XmlVersion::Implicit1_0)?;
    match value.chars().find(|c| !is_xml_char(*c)) {
        Some(c) => Err(EscapeError::InvalidCharRef(ParseCharRefError::IllegalCharacter(u32::from(c))).into()),
        None => Ok(value),
    }
}

/// The reason for a value whose references cannot be resolved: `invalid-value` for a
/// character reference to no character XML allows, else `malformed-xml`.
fn attr_reden(e: &quick_xml::Error) -> Reden {
    if forbidden_ref(e).is_some() { Reden::InvalidValue } else { Reden::MalformedXml }
}

/// The number of a character reference that is well-formed but stands for no
/// character XML allows (`&#0;`, a surrogate's number, past U+10FFFF, or one
/// `normalize` refused); `None` for other errors (not a number: not well-formed).
fn forbidden_ref(e: &quick_xml::Error) -> Option<u32> {
    use quick_xml::escape::{EscapeError, ParseCharRefError};
    match e {
        quick_xml::Error::Escape(EscapeError::InvalidCharRef(
            ParseCharRefError::IllegalCharacter(n) | ParseCharRefError::InvalidCodepoint(n),
        )) => Some(*n),
        _ => None,
    }
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
