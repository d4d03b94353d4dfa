//! A Structured Fields Dictionary parser (RFC 8941 4.2.2), enough for the targeted cache fields
//! (RFC 9213 2.1): members keep their bare item's type, parameters are parsed and dropped (RFC
//! 9213 2.1: "Parameters received on cache directives are to be ignored"), and inner lists are
//! parsed and kept only as [`Item::InnerList`], which no cache directive accepts.

/// A member value's type and content (RFC 8941 3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// `sf-integer`, at most 15 digits (3.3.1).
    Integer(i64),
    /// `sf-decimal` (3.3.2); its value is never needed.
    Decimal,
    /// `sf-string` with its escapes undone (3.3.3).
    String(String),
    /// `sf-token` (3.3.4).
    Token(String),
    /// `sf-binary` (3.3.5); its value is never needed.
    ByteSequence,
    /// `sf-boolean` (3.3.6); a member without `=` is `true`.
    Boolean(bool),
    /// An inner list (3.1.1).
    InnerList,
}

/// Parse a Dictionary field value; `None` on any parsing error (4.2: "fail parsing"). Keys are
/// unique: a repeated key overwrites the earlier value in its original position (4.2.2).
pub fn parse_dictionary(input: &str) -> Option<Vec<(String, Item)>> {
    let mut p = Parser {
        s: input.as_bytes(),
        i: 0,
    };
    p.skip_sp();
    let mut members: Vec<(String, Item)> = Vec::new();
    while !p.at_end() {
        let key = p.key()?;
        let item = if p.eat(b'=') {
            p.item_or_inner_list()?
        } else {
            p.parameters()?;
            Item::Boolean(true)
        };
        match members.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = item,
            None => members.push((key, item)),
        }
        p.skip_ows();
        if p.at_end() {
            break;
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip_ows();
        if p.at_end() {
            // A trailing comma.
            return None;
        }
    }
    Some(members)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn skip_while(&mut self, f: impl Fn(u8) -> bool) {
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
    }

    fn skip_sp(&mut self) {
        self.skip_while(|c| c == b' ');
    }

    fn skip_ows(&mut self) {
        self.skip_while(|c| c == b' ' || c == b'\t');
    }

    /// The bytes from `start` to the cursor as text (only ever ASCII, checked by the callers).
    fn taken(&self, start: usize) -> String {
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    /// `key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )` (4.2.3.3).
    fn key(&mut self) -> Option<String> {
        let start = self.i;
        if !self
            .peek()
            .is_some_and(|c| c.is_ascii_lowercase() || c == b'*')
        {
            return None;
        }
        self.skip_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"_-.*".contains(&c));
        Some(self.taken(start))
    }

    /// 4.2.1.1.
    fn item_or_inner_list(&mut self) -> Option<Item> {
        if self.eat(b'(') {
            loop {
                self.skip_sp();
                if self.eat(b')') {
                    break;
                }
                self.bare_item()?;
                self.parameters()?;
                if !matches!(self.peek(), Some(b' ' | b')')) {
                    return None;
                }
            }
            self.parameters()?;
            return Some(Item::InnerList);
        }
        let item = self.bare_item()?;
        self.parameters()?;
        Some(item)
    }

    /// 4.2.3.2: the parameters, which are dropped.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_sp();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    /// 4.2.3.1.
    fn bare_item(&mut self) -> Option<Item> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b':' => self.byte_sequence(),
            b'?' => self.boolean(),
            c if c.is_ascii_alphabetic() || c == b'*' => Some(self.token()),
            _ => None,
        }
    }

    /// 4.2.4.
    fn number(&mut self) -> Option<Item> {
        let negative = self.eat(b'-');
        let start = self.i;
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return None;
        }
        self.skip_while(|c| c.is_ascii_digit());
        let int_len = self.i - start;
        if !self.eat(b'.') {
            if int_len > 15 {
                return None;
            }
            let digits = std::str::from_utf8(&self.s[start..self.i]).ok()?;
            let value: i64 = digits.parse().ok()?;
            return Some(Item::Integer(if negative { -value } else { value }));
        }
        if int_len > 12 {
            return None;
        }
        let frac_start = self.i;
        self.skip_while(|c| c.is_ascii_digit());
        let frac_len = self.i - frac_start;
        (1..=3).contains(&frac_len).then_some(Item::Decimal)
    }

    /// 4.2.5.
    fn string(&mut self) -> Option<Item> {
        self.i += 1;
        let mut out = String::new();
        loop {
            let c = self.peek()?;
            self.i += 1;
            match c {
                b'"' => return Some(Item::String(out)),
                b'\\' => {
                    let next = self.peek().filter(|&n| n == b'"' || n == b'\\')?;
                    self.i += 1;
                    out.push(char::from(next));
                }
                0x20..=0x7e => out.push(char::from(c)),
                _ => return None,
            }
        }
    }

    /// 4.2.6.
    fn token(&mut self) -> Item {
        let start = self.i;
        self.i += 1;
        self.skip_while(|c| crate::syntax::is_tchar(c) || c == b':' || c == b'/');
        Item::Token(self.taken(start))
    }

    /// 4.2.7: the base64 content is checked for its alphabet, not decoded.
    fn byte_sequence(&mut self) -> Option<Item> {
        self.i += 1;
        self.skip_while(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c));
        self.eat(b':').then_some(Item::ByteSequence)
    }

    /// 4.2.8.
    fn boolean(&mut self) -> Option<Item> {
        self.i += 1;
        let value = match self.peek()? {
            b'1' => true,
            b'0' => false,
            _ => return None,
        };
        self.i += 1;
        Some(Item::Boolean(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dictionary_members_and_types_rfc8941_4_2_2() {
        let ok: &[(&str, &[(&str, Item)])] = &[
            ("", &[]),
            ("  ", &[]),
            ("a", &[("a", Item::Boolean(true))]),
            ("a=1", &[("a", Item::Integer(1))]),
            ("a=-1", &[("a", Item::Integer(-1))]),
            ("a=1.5", &[("a", Item::Decimal)]),
            ("a=\"x\\\"y\"", &[("a", Item::String("x\"y".into()))]),
            ("a=abc/d:e", &[("a", Item::Token("abc/d:e".into()))]),
            ("a=:aGk=:", &[("a", Item::ByteSequence)]),
            ("a=?0", &[("a", Item::Boolean(false))]),
            ("a=(1 2);p", &[("a", Item::InnerList)]),
            (
                "a;p=1, b=2;q",
                &[("a", Item::Boolean(true)), ("b", Item::Integer(2))],
            ),
            (
                "a=1,\tb",
                &[("a", Item::Integer(1)), ("b", Item::Boolean(true))],
            ),
            (
                "a=1, b, a=3",
                &[("a", Item::Integer(3)), ("b", Item::Boolean(true))],
            ),
            (
                "a=999999999999999",
                &[("a", Item::Integer(999_999_999_999_999))],
            ),
        ];
        for (input, want) in ok {
            let got = parse_dictionary(input);
            let want: Vec<(String, Item)> = want
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            assert_eq!(got, Some(want), "{input:?}");
        }
        for bad in [
            "A=1",
            "a=",
            "a,",
            "a,,b",
            "a=1 b",
            "\ta",
            "a=1000000000000000",
            "a=1.",
            "a=1.2345",
            "a=\"x",
            "a=\"\\x\"",
            "a=:ab",
            "a=?2",
            "a=(1",
            "a=@1",
            "1a",
            "a;",
            "a=\"\u{e9}\"",
        ] {
            assert_eq!(parse_dictionary(bad), None, "{bad:?}");
        }
    }
}
