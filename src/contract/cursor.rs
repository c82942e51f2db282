//! A strict cursor over quick-xml's namespace-aware pull reader.
//!
//! It walks one document the way an XSD `sequence` reads it: child elements in the
//! message namespace, in schema order, no unknown elements or attributes, no text in
//! element-only content, no DOCTYPE, a bounded depth. It keeps the element path so that
//! every error names where it happened, with line and column.

use std::borrow::Cow;

use quick_xml::events::{BytesStart, Event};
use quick_xml::name::{Namespace, ResolveResult};
use quick_xml::reader::NsReader;

use super::NAMESPACE;
use super::error::DecodeError;
use super::model::Reden;

const XSI: &str = "http://www.w3.org/2001/XMLSchema-instance";

/// One child of a sequence: its name and whether it may repeat.
pub(crate) type Child = (&'static str, bool);

#[derive(Clone, Copy)]
struct Seg {
    name: &'static str,
    /// 1-based position among repeated siblings; 0 for a non-repeating element.
    index: u32,
    attr: bool,
}

/// An element the cursor has entered.
pub(crate) struct Open<'i> {
    /// Index of the element in the parent's child list.
    pub which: usize,
    pub start: BytesStart<'i>,
    /// Byte offset of the start tag.
    pub pos: u64,
}

pub(crate) struct Cursor<'i> {
    src: &'i str,
    reader: NsReader<&'i [u8]>,
    path: Vec<Seg>,
    max_depth: usize,
    pub(crate) message_id: Option<uuid::Uuid>,
}

impl<'i> Cursor<'i> {
    pub(crate) fn new(src: &'i str, max_depth: usize) -> Self {
        let mut reader = NsReader::from_str(src);
        let cfg = reader.config_mut();
        cfg.expand_empty_elements = true;
        cfg.check_end_names = true;
        Self {
            src,
            reader,
            path: Vec::with_capacity(8),
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
            push(seg.name, seg.index, seg.attr);
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
        self.err(
            Reden::MalformedXml,
            None,
            format!("not well-formed XML: {e}"),
            pos,
        )
    }

    /// Classifies a resolved element namespace without keeping the reader borrowed.
    fn ns_of(ns: &ResolveResult<'_>) -> NsCheck {
        match ns {
            ResolveResult::Bound(Namespace(n)) if *n == NAMESPACE => NsCheck::Ours,
            ResolveResult::Bound(Namespace(n)) => NsCheck::Other((*n).to_owned()),
            _ => NsCheck::NoNamespace,
        }
    }

    fn check_ns(&self, ns: NsCheck, local: &str, pos: u64) -> Result<(), DecodeError> {
        let detail = match ns {
            NsCheck::Ours => return Ok(()),
            NsCheck::Other(n) => format!("element is in namespace '{n}', expected '{NAMESPACE}'"),
            NsCheck::NoNamespace => format!("element has no namespace, expected '{NAMESPACE}'"),
        };
        Err(self.err(Reden::WrongNamespace, Some((local, false)), detail, pos))
    }

    /// Reads the prolog and enters the root element, which must be `root`.
    pub(crate) fn open_root(
        &mut self,
        root: &'static str,
    ) -> Result<(BytesStart<'i>, u64), DecodeError> {
        loop {
            let pos = self.reader.buffer_position();
            let (ns, ev) = match self.reader.read_resolved_event() {
                Ok((ns, ev)) => (Self::ns_of(&ns), ev),
                Err(e) => return Err(self.xml_err(e)),
            };
            match ev {
                Event::Decl(_) | Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.trim().is_empty() => {}
                Event::DocType(_) => {
                    return Err(self.err(
                        Reden::DoctypeForbidden,
                        None,
                        "a DOCTYPE is not allowed (no DTDs, no entity definitions)",
                        pos,
                    ));
                }
                Event::Start(start) => {
                    let local = start.local_name().into_inner().to_owned();
                    if local != root {
                        return Err(DecodeError::new(
                            Reden::WrongRoot,
                            local,
                            format!("the root element must be {root}"),
                        )
                        .at(self.src, pos));
                    }
                    self.path.push(Seg {
                        name: root,
                        index: 0,
                        attr: false,
                    });
                    if !matches!(ns, NsCheck::Ours) {
                        let mut e = self.check_ns(ns, root, pos).expect_err("namespace differs");
                        e.path = root.to_owned();
                        return Err(e);
                    }
                    return Ok((start, pos));
                }
                Event::Eof => {
                    return Err(self.err(
                        Reden::MalformedXml,
                        None,
                        "the body holds no root element",
                        pos,
                    ));
                }
                _ => {
                    return Err(self.err(
                        Reden::MalformedXml,
                        None,
                        "content before the root element",
                        pos,
                    ));
                }
            }
        }
    }

    /// After the root's end: only comments, PIs and white space may follow.
    pub(crate) fn finish(&mut self) -> Result<(), DecodeError> {
        loop {
            let pos = self.reader.buffer_position();
            match self.reader.read_event().map_err(|e| self.xml_err(e))? {
                Event::Eof => return Ok(()),
                Event::Comment(_) | Event::PI(_) => {}
                Event::Text(t) if t.trim().is_empty() => {}
                _ => {
                    return Err(self.err(
                        Reden::MalformedXml,
                        None,
                        "content after the root element",
                        pos,
                    ));
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
        let mut out: [Option<Cow<'s, str>>; N] = std::array::from_fn(|_| None);
        for a in start.attributes() {
            let a = a.map_err(|e| {
                self.err(
                    Reden::MalformedXml,
                    None,
                    format!("bad attribute: {e}"),
                    pos,
                )
            })?;
            let key = a.key;
            if key.as_namespace_binding().is_some() {
                continue;
            }
            let (ns, local) = self.reader.resolver().resolve_attribute(key);
            let local = local.into_inner();
            match ns {
                ResolveResult::Unbound => {}
                ResolveResult::Bound(Namespace(n)) if n == XSI => continue,
                _ => {
                    return Err(self.err(
                        Reden::UnexpectedAttribute,
                        Some((local, true)),
                        "attribute in a foreign namespace is not allowed here",
                        pos,
                    ));
                }
            }
            let Some(i) = names.iter().position(|n| *n == local) else {
                return Err(self.err(
                    Reden::UnexpectedAttribute,
                    Some((local, true)),
                    format!("unknown attribute (allowed: {})", list(&names)),
                    pos,
                ));
            };
            let value = a
                .normalized_value(quick_xml::XmlVersion::Implicit1_0)
                .map_err(|e| {
                    self.err(
                        Reden::MalformedXml,
                        Some((names[i], true)),
                        format!("bad attribute value: {e}"),
                        pos,
                    )
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
            self.err(
                Reden::MissingAttribute,
                Some((name, true)),
                "required attribute is missing",
                pos,
            )
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
        value
            .map(|v| self.parse(&v, Some((name, true)), pos, parse))
            .transpose()
    }

    /// Runs a value parser; on failure names the value and the path.
    pub(crate) fn parse<T>(
        &self,
        v: &str,
        extra: Option<(&str, bool)>,
        pos: u64,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<T, DecodeError> {
        parse(v).map_err(|why| {
            self.err(
                Reden::InvalidValue,
                extra,
                format!("'{}' {why}", clip(v)),
                pos,
            )
        })
    }

    /// Reads the next child element of the current element, or `None` at its end.
    /// Enforces the order and repetition of `children`; `last` carries the index of the
    /// previous child between calls (start with `None`).
    pub(crate) fn next_child(
        &mut self,
        children: &[Child],
        last: &mut Option<(usize, u32)>,
    ) -> Result<Option<Open<'i>>, DecodeError> {
        loop {
            let pos = self.reader.buffer_position();
            let (ns, ev) = match self.reader.read_resolved_event() {
                Ok((ns, ev)) => (Self::ns_of(&ns), ev),
                Err(e) => return Err(self.xml_err(e)),
            };
            match ev {
                Event::Start(start) => {
                    let local_raw = start.local_name();
                    let local = local_raw.into_inner();
                    let Some(which) = children.iter().position(|(n, _)| *n == local) else {
                        let allowed: Vec<&str> = children.iter().map(|c| c.0).collect();
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
                    self.check_ns(ns, children[which].0, pos)?;
                    let (name, repeats) = children[which];
                    let index = match *last {
                        Some((prev, n)) if prev == which => {
                            if !repeats {
                                return Err(self.err(
                                    Reden::UnexpectedElement,
                                    Some((name, false)),
                                    "element may appear only once",
                                    pos,
                                ));
                            }
                            n + 1
                        }
                        Some((prev, _)) if prev > which => {
                            return Err(self.err(
                                Reden::UnexpectedElement,
                                Some((name, false)),
                                format!(
                                    "element is out of order: it must come before {}",
                                    children[prev].0
                                ),
                                pos,
                            ));
                        }
                        _ => 1,
                    };
                    *last = Some((which, index));
                    if self.path.len() >= self.max_depth {
                        return Err(self.err(
                            Reden::TooDeep,
                            Some((name, false)),
                            format!("elements nest deeper than {} levels", self.max_depth),
                            pos,
                        ));
                    }
                    self.path.push(Seg {
                        name,
                        index: if repeats { index } else { 0 },
                        attr: false,
                    });
                    return Ok(Some(Open { which, start, pos }));
                }
                // The caller checks for missing children, then calls `close`.
                Event::End(_) => return Ok(None),
                Event::Text(t) if t.trim().is_empty() => {}
                Event::Comment(_) | Event::PI(_) => {}
                Event::DocType(_) => {
                    return Err(self.err(
                        Reden::DoctypeForbidden,
                        None,
                        "a DOCTYPE is not allowed",
                        pos,
                    ));
                }
                Event::Eof => {
                    return Err(self.err(
                        Reden::MalformedXml,
                        None,
                        "the document ends inside this element",
                        pos,
                    ));
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
        let mut acc: Option<Cow<'i, str>> = None;
        let text_pos = self.reader.buffer_position();
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
                        return Err(self.err(
                            Reden::MalformedXml,
                            None,
                            format!("bad character reference: {e}"),
                            pos,
                        ));
                    }
                },
                Event::Comment(_) | Event::PI(_) => continue,
                Event::End(_) => return Ok((acc.unwrap_or(Cow::Borrowed("")), text_pos)),
                Event::Start(s) => {
                    let local = s.local_name().into_inner().to_owned();
                    return Err(self.err(
                        Reden::UnexpectedElement,
                        Some((&local, false)),
                        "this element holds text only",
                        pos,
                    ));
                }
                Event::Eof => {
                    return Err(self.err(
                        Reden::MalformedXml,
                        None,
                        "the document ends inside this element",
                        pos,
                    ));
                }
                _ => {
                    return Err(self.err(
                        Reden::MalformedXml,
                        None,
                        "unexpected markup in text",
                        pos,
                    ));
                }
            };
            acc = Some(match acc {
                None => piece,
                Some(prev) => Cow::Owned(prev.into_owned() + &piece),
            });
        }
    }

    /// Reads a text-only element, parses it and leaves it; errors name the element.
    pub(crate) fn value<T>(
        &mut self,
        parse: impl FnOnce(&str) -> Result<T, &'static str>,
    ) -> Result<T, DecodeError> {
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
            Some(open) => Err(self.err(
                Reden::UnexpectedElement,
                None,
                "no child elements are allowed here",
                open.pos,
            )),
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
        self.path.pop();
    }
}

enum NsCheck {
    Ours,
    Other(String),
    NoNamespace,
}

fn list(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("@{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A value shortened for an error message.
fn clip(v: &str) -> String {
    let mut s: String = v.chars().take(40).collect();
    if v.chars().count() > 40 {
        s.push('…');
    }
    s
}
