//! The syntax tree the parser builds and the emitter prints: the Python subset's
//! expressions, each node knowing the height of the tree under it, so that no tree the
//! emitter recurses over is higher than [`MAX_DEPTH`](super::MAX_DEPTH).

/// An `and`/`or` chain is emitted flat in groups of at most this many operands, and longer
/// chains as a tree of such groups: minijinja compiles a flat chain into a left-nested tree
/// and recurses over it, so a 7,000-term `a or b or …` emitted flat overflows its stack.
pub(super) const MAX_FLAT_CHAIN: usize = 8;

/// Levels of brackets an `and`/`or` chain of `n` operands is emitted with.
pub(super) fn chain_levels(n: usize) -> usize {
    let mut levels = 1;
    let mut capacity = MAX_FLAT_CHAIN;
    while capacity < n {
        capacity = capacity.saturating_mul(MAX_FLAT_CHAIN);
        levels += 1;
    }
    levels
}

/// One node of the tree: what it is, and the height of the tree under it.
#[derive(Debug)]
pub(super) struct Node {
    /// Boxed to keep `Node` (and so each recursive parser frame) small.
    pub(super) kind: Box<Kind>,
    /// Height of the tree under this node (leaves are 0); bounded by
    /// [`MAX_DEPTH`](super::MAX_DEPTH).
    pub(super) height: usize,
}

/// The expressions of the subset.
#[derive(Debug)]
pub(super) enum Kind {
    Doc,
    Int(String),
    Float(String),
    Str(String),
    Bool(bool),
    NoneLit,
    /// A list, or a tuple (minijinja has no tuples).
    List(Vec<Node>),
    Dict(Vec<(Node, Node)>),
    Attr(Box<Node>, String),
    Index(Box<Node>, Box<Node>),
    Slice(Box<Node>, [Option<Box<Node>>; 3]),
    Method(Box<Node>, String, Vec<Node>),
    /// `utils.NAME(args, key=value)`.
    Util(String, Vec<Node>, Kwargs),
    Builtin(&'static str, Vec<Node>),
    Not(Box<Node>),
    Neg(Box<Node>),
    Pos(Box<Node>),
    /// Arithmetic: `+ - * / // % **`.
    Binary(&'static str, Box<Node>, Box<Node>),
    /// A (possibly chained) comparison: `a < b <= c`.
    Compare(Box<Node>, Vec<(&'static str, Node)>),
    /// `x is None` (false) / `x is not None` (true).
    IsNone(Box<Node>, bool),
    /// `and` / `or` over two or more operands.
    BoolOp(&'static str, Vec<Node>),
    /// `body if test else orelse`.
    IfElse(Box<Node>, Box<Node>, Box<Node>),
}

/// Keyword arguments of a call, in order.
pub(super) type Kwargs = Vec<(String, Node)>;

impl Kind {
    /// Height of a node of this kind, from its direct children's heights.
    pub(super) fn height(&self) -> usize {
        fn max<'n>(nodes: impl IntoIterator<Item = &'n Node>) -> usize {
            nodes.into_iter().map(|n| n.height).max().unwrap_or(0)
        }
        match self {
            Kind::Doc
            | Kind::Int(_)
            | Kind::Float(_)
            | Kind::Str(_)
            | Kind::Bool(_)
            | Kind::NoneLit => 0,
            Kind::List(items) | Kind::Builtin(_, items) => 1 + max(items),
            Kind::Dict(pairs) => 1 + max(pairs.iter().flat_map(|(k, v)| [k, v])),
            Kind::Attr(x, _) | Kind::Not(x) | Kind::Neg(x) | Kind::Pos(x) | Kind::IsNone(x, _) => {
                1 + x.height
            }
            Kind::Index(a, b) | Kind::Binary(_, a, b) => 1 + a.height.max(b.height),
            Kind::Slice(x, parts) => 1 + x.height.max(max(parts.iter().flatten().map(|b| &**b))),
            Kind::Method(x, _, args) => 1 + x.height.max(max(args)),
            Kind::Util(_, args, kwargs) => 1 + max(args).max(max(kwargs.iter().map(|(_, v)| v))),
            Kind::Compare(x, ops) => 1 + x.height.max(max(ops.iter().map(|(_, v)| v))),
            Kind::BoolOp(_, items) => chain_levels(items.len()) + max(items),
            Kind::IfElse(a, b, c) => 1 + a.height.max(b.height).max(c.height),
        }
    }
}

// ---------------------------------------------------------------------------------------
