//! One pass over one module's AST that keeps only what closures need.
//!
//! The result, a [`ModuleSummary`], is independent of every other file and of the environment,
//! so it is what the per-file cache stores and what the parallel phase produces. Resolution of
//! import names and closure computation happen later, on summaries only.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use ruff_python_ast::visitor::source_order::{self, SourceOrderVisitor};
use ruff_python_ast::{self as ast, Expr, Stmt};
use ruff_python_parser::{parse_unchecked, Mode, ParseOptions};
use ruff_source_file::LineIndex;
use ruff_text_size::{Ranged, TextSize};
use serde::{Deserialize, Serialize};

/// A name of one module, as an index into its [`ModuleSummary::names`]. Names are compared and
/// followed millions of times per tree; an index is what makes that cheap in time and memory.
pub type NameId = u32;

/// Everything the closure computation needs to know about one module.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ModuleSummary {
    pub imports: Vec<ImportEdge>,
    /// Scope 0 is the module; the others are defs, classes, lambdas and comprehensions.
    pub scopes: Vec<Scope>,
    /// Every name the module reads or binds at any level, sorted and unique, so that id order
    /// is name order.
    pub names: NameTable,
    /// Module-level binding statements grouped by the name they bind (in name order; a name's
    /// statements in source order): those of name `i` are
    /// `bindings[binding_offsets[i]..binding_offsets[i + 1]]`, found without a search.
    pub bindings: Vec<Binding>,
    pub binding_offsets: Vec<u32>,
    /// Problems found while reading this file: syntax errors, non-constant dynamic imports.
    pub problems: Vec<Problem>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImportEdge {
    /// Dotted module name as written, without the leading dots of a relative import.
    pub module: String,
    /// Number of leading dots (0 = absolute).
    pub level: u32,
    /// For `from module import member`: the member (`*` for a star import).
    pub member: Option<String>,
    pub line: u32,
    /// Innermost scope that contains the import statement.
    pub scope: u32,
    pub context: EdgeContext,
}

/// Why and when an import runs. More than one can hold at once (an optional import inside a
/// function is both `in_function` and `optional`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EdgeContext {
    pub in_function: bool,
    pub conditional: bool,
    pub optional: bool,
    pub type_checking: bool,
    pub dynamic: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ScopeKind {
    Module,
    Function,
    Class,
    Lambda,
    Comprehension,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Scope {
    pub kind: ScopeKind,
    /// Qualified name inside the module (`Model.fit`, `outer.<locals>.inner` is kept as
    /// `outer.inner`); empty for the module scope.
    pub name: String,
    pub line: u32,
    pub parent: u32,
    // Boxed slices, not Vecs: a whole tree's scopes stay in memory, and these never grow.
    pub children: Box<[u32]>,
    /// Names this scope (with everything nested in it, and its decorators, defaults, bases and
    /// annotations) reads but does not bind itself: they resolve to the module's globals.
    pub free_names: Box<[NameId]>,
    /// Names read when the `def`/`class` statement itself runs: decorators, defaults,
    /// annotations, bases, and for a class its body's own statements (not its methods' bodies).
    pub definition_reads: Box<[NameId]>,
    /// Import edges whose innermost scope is this one.
    pub imports: Box<[u32]>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// `import x` / `from x import y` bound the name.
    Import { edge: u32 },
    /// A `def` or `class` statement bound the name.
    Definition { scope: u32 },
    /// Any other statement bound it: what its value reads, and dynamic imports inside it.
    Value {
        line: u32,
        reads: Vec<NameId>,
        edges: Vec<u32>,
    },
}

/// Sorted, unique names stored end to end in one string: a whole site-packages has ~670k of
/// them, and a `String` each cost three times their text.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct NameTable {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<u32>,
}

impl NameTable {
    /// `names` must be sorted and unique.
    pub fn from_sorted<'a>(names: impl IntoIterator<Item = &'a str>) -> NameTable {
        let mut table = NameTable::default();
        for name in names {
            table.text.push_str(name);
            table.ends.push(table.text.len() as u32);
        }
        table.text.shrink_to_fit();
        table.ends.shrink_to_fit();
        table
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, id: NameId) -> &str {
        let end = self.ends[id as usize] as usize;
        let start = match id {
            0 => 0,
            _ => self.ends[id as usize - 1] as usize,
        };
        &self.text[start..end]
    }

    /// The id of `name`, by binary search (the names are sorted).
    pub fn find(&self, name: &str) -> Option<NameId> {
        let (mut low, mut high) = (0, self.len());
        while low < high {
            let middle = (low + high) / 2;
            match self.get(middle as NameId).cmp(name) {
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
                std::cmp::Ordering::Equal => return Some(middle as NameId),
            }
        }
        None
    }

    fn heap_bytes(&self) -> usize {
        self.text.capacity() + 4 * self.ends.capacity()
    }
}

impl ModuleSummary {
    pub fn name(&self, id: NameId) -> &str {
        self.names.get(id)
    }

    pub fn name_id(&self, name: &str) -> Option<NameId> {
        self.names.find(name)
    }

    /// Roughly the heap bytes this summary holds (capacities, not allocator overhead), for
    /// `LFM_TIMINGS=1` memory accounting.
    pub fn approximate_heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let ids = |list: &[u32]| 4 * list.len();
        let mut total = self.imports.capacity() * size_of::<ImportEdge>()
            + self.scopes.capacity() * size_of::<Scope>()
            + self.names.heap_bytes()
            + self.bindings.capacity() * size_of::<Binding>()
            + self.binding_offsets.capacity() * 4;
        for edge in &self.imports {
            total += edge.module.capacity() + edge.member.as_ref().map_or(0, String::capacity);
        }
        for scope in &self.scopes {
            total += scope.name.capacity()
                + ids(&scope.children)
                + ids(&scope.free_names)
                + ids(&scope.definition_reads)
                + ids(&scope.imports);
        }
        for binding in &self.bindings {
            if let Binding::Value { reads, edges, .. } = binding {
                total += ids(reads) + ids(edges);
            }
        }
        total
    }

    /// The module-level statements that bind `name`.
    pub fn bindings_of(&self, name: NameId) -> Option<&[Binding]> {
        let start = *self.binding_offsets.get(name as usize)? as usize;
        let end = *self.binding_offsets.get(name as usize + 1)? as usize;
        (start < end).then(|| &self.bindings[start..end])
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Problem {
    pub line: u32,
    pub message: String,
}

/// Parse `source` and summarise it. Never fails: syntax errors become [`Problem`]s and every
/// import the error-recovering parser still sees is kept.
pub fn summarize(source: &str) -> ModuleSummary {
    let parsed = parse_unchecked(source, ParseOptions::from(Mode::Module));
    let line_index = LineIndex::from_source_text(source);
    let mut extractor = Extractor::new(&line_index);
    if let ast::Mod::Module(module) = parsed.syntax() {
        extractor.visit_body(&module.body);
    }
    let mut summary = extractor.finish();
    for error in parsed.errors().iter().take(MAX_SYNTAX_ERRORS_REPORTED) {
        summary.problems.push(Problem {
            line: line_index.line_index(error.location.start()).get() as u32,
            message: format!("syntax error: {}", error.error),
        });
    }
    if parsed.errors().len() > MAX_SYNTAX_ERRORS_REPORTED {
        summary.problems.push(Problem {
            line: 0,
            message: format!(
                "{} more syntax errors not shown (imports were still recovered)",
                parsed.errors().len() - MAX_SYNTAX_ERRORS_REPORTED
            ),
        });
    }
    summary
}

const MAX_SYNTAX_ERRORS_REPORTED: usize = 3;

/// Exception types whose handler makes the guarded import optional.
const IMPORT_GUARDS: &[&str] = &[
    "ImportError",
    "ModuleNotFoundError",
    "Exception",
    "BaseException",
];

/// Name lists use ids in first-seen order while the module is visited and may repeat (a push
/// is cheaper than a set insert, and most reads repeat); `finish` renumbers them in name order
/// and makes them unique.
#[derive(Default)]
struct ScopeBuild {
    children: Vec<u32>,
    loads: Vec<NameId>,
    binds: Vec<NameId>,
    globals: Vec<NameId>,
    header_loads: Vec<NameId>,
}

/// Collects what one module-level statement reads and imports, to attach to the names it binds.
#[derive(Default)]
struct StatementCapture {
    reads: Vec<NameId>,
    edges: Vec<u32>,
}

struct Extractor<'a> {
    line_index: &'a LineIndex,
    imports: Vec<ImportEdge>,
    scopes: Vec<Scope>,
    builds: Vec<ScopeBuild>,
    /// Names borrowed from the AST, which outlives the extractor.
    names: Vec<&'a str>,
    name_ids: HashMap<&'a str, NameId>,
    /// Module-level bindings in source order, by first-seen name id.
    bindings: Vec<(NameId, Binding)>,
    problems: Vec<Problem>,
    current: u32,
    function_depth: u32,
    conditional_depth: u32,
    optional_depth: u32,
    type_checking_depth: u32,
    /// Scopes whose decorators/defaults/bases are being visited: their reads count for them too.
    header_targets: Vec<u32>,
    capture: Option<StatementCapture>,
    /// Local names bound to `typing`/`typing_extensions`, and to `TYPE_CHECKING` itself.
    typing_aliases: HashSet<&'a str>,
    type_checking_aliases: HashSet<&'a str>,
    importlib_aliases: HashSet<&'a str>,
    import_module_aliases: HashSet<&'a str>,
}

impl<'a> Extractor<'a> {
    fn new(line_index: &'a LineIndex) -> Self {
        let mut extractor = Extractor {
            line_index,
            imports: Vec::new(),
            scopes: Vec::new(),
            builds: Vec::new(),
            names: Vec::new(),
            name_ids: HashMap::default(),
            bindings: Vec::new(),
            problems: Vec::new(),
            current: 0,
            function_depth: 0,
            conditional_depth: 0,
            optional_depth: 0,
            type_checking_depth: 0,
            header_targets: Vec::new(),
            capture: None,
            typing_aliases: ["typing", "typing_extensions"].into_iter().collect(),
            type_checking_aliases: ["TYPE_CHECKING"].into_iter().collect(),
            importlib_aliases: ["importlib"].into_iter().collect(),
            import_module_aliases: HashSet::default(),
        };
        extractor.new_scope(ScopeKind::Module, String::new(), 0);
        extractor
    }

    fn line(&self, offset: TextSize) -> u32 {
        self.line_index.line_index(offset).get() as u32
    }

    fn new_scope(&mut self, kind: ScopeKind, name: String, line: u32) -> u32 {
        let id = self.scopes.len() as u32;
        let parent = self.current;
        if id != 0 {
            self.builds[parent as usize].children.push(id);
        }
        self.scopes.push(Scope {
            kind,
            name,
            line,
            parent,
            children: Box::default(),
            free_names: Box::default(),
            definition_reads: Box::default(),
            imports: Box::default(),
        });
        self.builds.push(ScopeBuild::default());
        id
    }

    fn qualified_child_name(&self, name: &str) -> String {
        let parent = &self.scopes[self.current as usize];
        match parent.kind {
            ScopeKind::Module => name.to_string(),
            _ if parent.name.is_empty() => name.to_string(),
            _ => format!("{}.{}", parent.name, name),
        }
    }

    fn context(&self) -> EdgeContext {
        EdgeContext {
            in_function: self.function_depth > 0,
            conditional: self.conditional_depth > 0,
            optional: self.optional_depth > 0,
            type_checking: self.type_checking_depth > 0,
            dynamic: false,
        }
    }

    fn intern(&mut self, name: &'a str) -> NameId {
        let next = self.names.len() as NameId;
        let id = *self.name_ids.entry(name).or_insert(next);
        if id == next {
            self.names.push(name);
        }
        id
    }

    fn record_load(&mut self, name: &'a str) {
        let id = self.intern(name);
        self.builds[self.current as usize].loads.push(id);
        for &target in &self.header_targets {
            self.builds[target as usize].header_loads.push(id);
        }
        if let Some(capture) = &mut self.capture {
            capture.reads.push(id);
        }
    }

    fn record_bind(&mut self, name: &'a str) -> NameId {
        let id = self.intern(name);
        self.builds[self.current as usize].binds.push(id);
        id
    }

    fn bind(&mut self, name: &'a str, binding: impl FnOnce() -> Binding) {
        let id = self.record_bind(name);
        if self.current == 0 {
            self.bindings.push((id, binding()));
        }
    }

    fn add_edge(&mut self, edge: ImportEdge) -> u32 {
        let id = self.imports.len() as u32;
        self.imports.push(edge);
        if let Some(capture) = &mut self.capture {
            capture.edges.push(id);
        }
        id
    }

    fn visit_import(&mut self, import: &'a ast::StmtImport) {
        let line = self.line(import.start());
        for alias in &import.names {
            let module = alias.name.id.as_str();
            let edge = self.add_edge(ImportEdge {
                module: module.to_string(),
                level: 0,
                member: None,
                line,
                scope: self.current,
                context: self.context(),
            });
            // `import a.b` binds `a`; `import a.b as c` binds `c`.
            let bound = match &alias.asname {
                Some(asname) => asname.id.as_str(),
                None => module.split('.').next().unwrap_or_default(),
            };
            if module == "typing" || module == "typing_extensions" {
                self.typing_aliases.insert(bound);
            }
            if module == "importlib" {
                self.importlib_aliases.insert(bound);
            }
            self.bind(bound, || Binding::Import { edge });
        }
    }

    fn visit_import_from(&mut self, import: &'a ast::StmtImportFrom) {
        let line = self.line(import.start());
        let module = import.module.as_ref().map_or("", |m| m.id.as_str());
        for alias in &import.names {
            let member = alias.name.id.as_str();
            let edge = self.add_edge(ImportEdge {
                module: module.to_string(),
                level: import.level,
                member: Some(member.to_string()),
                line,
                scope: self.current,
                context: self.context(),
            });
            if member == "*" {
                self.bind("*", || Binding::Import { edge });
                continue;
            }
            let bound = alias.asname.as_ref().map_or(member, |a| a.id.as_str());
            if import.level == 0 {
                if (module == "typing" || module == "typing_extensions")
                    && member == "TYPE_CHECKING"
                {
                    self.type_checking_aliases.insert(bound);
                }
                if module == "importlib" && member == "import_module" {
                    self.import_module_aliases.insert(bound);
                }
            }
            self.bind(bound, || Binding::Import { edge });
        }
    }

    fn is_type_checking_test(&self, test: &Expr) -> bool {
        match test {
            Expr::Name(name) => self.type_checking_aliases.contains(name.id.as_str()),
            Expr::Attribute(attribute) => {
                attribute.attr.id.as_str() == "TYPE_CHECKING"
                    && matches!(&*attribute.value, Expr::Name(n) if self.typing_aliases.contains(n.id.as_str()))
            }
            _ => false,
        }
    }

    fn visit_if(&mut self, stmt: &'a ast::StmtIf) {
        self.visit_expr(&stmt.test);
        let negated = match &*stmt.test {
            Expr::UnaryOp(unary) if unary.op == ast::UnaryOp::Not => Some(&*unary.operand),
            _ => None,
        };
        let body_is_type_checking = self.is_type_checking_test(&stmt.test);
        let else_is_type_checking =
            negated.is_some_and(|operand| self.is_type_checking_test(operand));
        self.with_branch(body_is_type_checking, |this| this.visit_body(&stmt.body));
        for (index, clause) in stmt.elif_else_clauses.iter().enumerate() {
            if let Some(test) = &clause.test {
                self.visit_expr(test);
            }
            let type_checking = else_is_type_checking && index == 0 && clause.test.is_none();
            self.with_branch(type_checking, |this| this.visit_body(&clause.body));
        }
    }

    fn with_branch(&mut self, type_checking: bool, visit: impl FnOnce(&mut Self)) {
        if type_checking {
            self.type_checking_depth += 1;
        } else {
            self.conditional_depth += 1;
        }
        visit(self);
        if type_checking {
            self.type_checking_depth -= 1;
        } else {
            self.conditional_depth -= 1;
        }
    }

    fn visit_try(&mut self, stmt: &'a ast::StmtTry) {
        let guards_imports = stmt.handlers.iter().any(|handler| {
            let ast::ExceptHandler::ExceptHandler(handler) = handler;
            match handler.type_.as_deref() {
                None => true,
                Some(expr) => catches_import_error(expr),
            }
        });
        if guards_imports {
            self.optional_depth += 1;
        }
        self.visit_body(&stmt.body);
        if guards_imports {
            self.optional_depth -= 1;
        }
        self.conditional_depth += 1;
        for handler in &stmt.handlers {
            let ast::ExceptHandler::ExceptHandler(handler) = handler;
            if let Some(type_) = &handler.type_ {
                self.visit_expr(type_);
            }
            if let Some(name) = &handler.name {
                self.bind(name.id.as_str(), || Binding::Value {
                    line: 0,
                    reads: vec![],
                    edges: vec![],
                });
            }
            self.visit_body(&handler.body);
        }
        self.visit_body(&stmt.orelse);
        self.conditional_depth -= 1;
        self.visit_body(&stmt.finalbody);
    }

    fn visit_function_def(&mut self, def: &'a ast::StmtFunctionDef) {
        let line = self.line(def.name.start());
        let name = self.qualified_child_name(def.name.id.as_str());
        let scope = self.new_scope(ScopeKind::Function, name, line);
        self.header_targets.push(scope);
        for decorator in &def.decorator_list {
            self.visit_expr(&decorator.expression);
        }
        self.visit_parameter_headers(&def.parameters);
        if let Some(returns) = &def.returns {
            self.visit_expr(returns);
        }
        self.header_targets.pop();
        self.bind(def.name.id.as_str(), || Binding::Definition { scope });
        self.enter_scope(scope, true, |this| {
            this.bind_parameters(&def.parameters);
            this.visit_body(&def.body);
        });
    }

    fn visit_class_def(&mut self, class: &'a ast::StmtClassDef) {
        let line = self.line(class.name.start());
        let name = self.qualified_child_name(class.name.id.as_str());
        let scope = self.new_scope(ScopeKind::Class, name, line);
        self.header_targets.push(scope);
        for decorator in &class.decorator_list {
            self.visit_expr(&decorator.expression);
        }
        if let Some(arguments) = &class.arguments {
            self.visit_arguments(arguments);
        }
        self.header_targets.pop();
        self.bind(class.name.id.as_str(), || Binding::Definition { scope });
        self.enter_scope(scope, false, |this| this.visit_body(&class.body));
    }

    /// Defaults and annotations are evaluated when the `def` runs, in the enclosing scope.
    fn visit_parameter_headers(&mut self, parameters: &'a ast::Parameters) {
        for parameter in parameters.iter_non_variadic_params() {
            if let Some(default) = &parameter.default {
                self.visit_expr(default);
            }
            if let Some(annotation) = &parameter.parameter.annotation {
                self.visit_expr(annotation);
            }
        }
        for variadic in [&parameters.vararg, &parameters.kwarg]
            .into_iter()
            .flatten()
        {
            if let Some(annotation) = &variadic.annotation {
                self.visit_expr(annotation);
            }
        }
    }

    fn bind_parameters(&mut self, parameters: &'a ast::Parameters) {
        for parameter in parameters.iter() {
            self.record_bind(parameter.name().id.as_str());
        }
    }

    fn enter_scope(&mut self, scope: u32, is_function: bool, visit: impl FnOnce(&mut Self)) {
        let saved_scope = std::mem::replace(&mut self.current, scope);
        // A def/class body is not part of the module-level statement that defines it.
        let saved_capture = self.capture.take();
        if is_function {
            self.function_depth += 1;
        }
        visit(self);
        if is_function {
            self.function_depth -= 1;
        }
        self.capture = saved_capture;
        self.current = saved_scope;
    }

    fn record_dynamic_import(&mut self, call: &'a ast::ExprCall) {
        let is_import_call = match &*call.func {
            Expr::Name(name) => {
                name.id.as_str() == "__import__"
                    || self.import_module_aliases.contains(name.id.as_str())
            }
            Expr::Attribute(attribute) => {
                attribute.attr.id.as_str() == "import_module"
                    && matches!(&*attribute.value, Expr::Name(n) if self.importlib_aliases.contains(n.id.as_str()))
            }
            _ => false,
        };
        if is_import_call {
            let line = self.line(call.start());
            match call.arguments.args.first().or_else(|| {
                call.arguments
                    .find_keyword("name")
                    .map(|keyword| &keyword.value)
            }) {
                Some(Expr::StringLiteral(literal)) => {
                    let written = literal.value.to_str();
                    let level = written.chars().take_while(|&c| c == '.').count() as u32;
                    let mut module = written[level as usize..].to_string();
                    if level > 0 {
                        // importlib.import_module(".sub", "pkg") is absolute once the package is known.
                        if let Some(Expr::StringLiteral(package)) =
                            call.arguments.args.get(1).or_else(|| {
                                call.arguments.find_keyword("package").map(|k| &k.value)
                            })
                        {
                            module = join_relative(package.value.to_str(), level, &module);
                        }
                    }
                    let level = if module.contains('.') || level == 0 {
                        0
                    } else {
                        level
                    };
                    let mut context = self.context();
                    context.dynamic = true;
                    self.add_edge(ImportEdge {
                        module,
                        level,
                        member: None,
                        line,
                        scope: self.current,
                        context,
                    });
                }
                Some(_) => self.problems.push(Problem {
                    line,
                    message: "dynamic import with a computed module name; its target is unknown"
                        .into(),
                }),
                None => {}
            }
        }
    }

    fn visit_scoped_expr(&mut self, kind: ScopeKind, expr: &'a Expr) {
        let line = self.line(expr.start());
        let name = self.qualified_child_name(match kind {
            ScopeKind::Lambda => "<lambda>",
            _ => "<comprehension>",
        });
        let scope = self.new_scope(kind, name, line);
        match expr {
            Expr::Lambda(lambda) => {
                if let Some(parameters) = &lambda.parameters {
                    self.header_targets.push(scope);
                    self.visit_parameter_headers(parameters);
                    self.header_targets.pop();
                }
                self.enter_scope(scope, true, |this| {
                    if let Some(parameters) = &lambda.parameters {
                        this.bind_parameters(parameters);
                    }
                    this.visit_expr(&lambda.body);
                });
            }
            _ => self.enter_scope(scope, false, |this| source_order::walk_expr(this, expr)),
        }
    }

    fn finish(mut self) -> ModuleSummary {
        let mut scope_imports: Vec<Vec<u32>> = vec![Vec::new(); self.scopes.len()];
        for (index, edge) in self.imports.iter().enumerate() {
            scope_imports[edge.scope as usize].push(index as u32);
        }
        for ((scope, imports), build) in self
            .scopes
            .iter_mut()
            .zip(scope_imports)
            .zip(&mut self.builds)
        {
            scope.imports = imports.into_boxed_slice();
            scope.children = std::mem::take(&mut build.children).into_boxed_slice();
        }
        // Renumber names in name order: sorted id lists are then sorted name lists, and the
        // closure walk visits names in the same order whatever order the source used them in.
        let mut order: Vec<NameId> = (0..self.names.len() as NameId).collect();
        let names = &self.names;
        order.sort_unstable_by(|&a, &b| names[a as usize].cmp(names[b as usize]));
        let mut renumbered = vec![0 as NameId; order.len()];
        for (new, &old) in order.iter().enumerate() {
            renumbered[old as usize] = new as NameId;
        }
        let renumbered = &renumbered;
        let sorted_ids = |ids: &[NameId]| -> Vec<NameId> {
            let mut sorted: Vec<NameId> = ids.iter().map(|&old| renumbered[old as usize]).collect();
            sort_unique(&mut sorted);
            sorted
        };
        // Children were created after their parents, so a reverse sweep sees every child first.
        for id in (0..self.scopes.len()).rev() {
            let build = &self.builds[id];
            let globals = sorted_ids(&build.globals);
            let mut binds = sorted_ids(&build.binds);
            binds.retain(|name| globals.binary_search(name).is_err());
            let loads = sorted_ids(&build.loads);
            let header_loads = sorted_ids(&build.header_loads);
            let mut free = loads.clone();
            for &child in self.scopes[id].children.iter() {
                free.extend_from_slice(&self.scopes[child as usize].free_names);
            }
            sort_unique(&mut free);
            free.retain(|name| binds.binary_search(name).is_err());
            free.extend_from_slice(&header_loads);
            sort_unique(&mut free);
            self.scopes[id].free_names = free.into_boxed_slice();
            let mut definition = header_loads;
            if self.scopes[id].kind == ScopeKind::Class {
                definition.extend(
                    loads
                        .iter()
                        .filter(|name| binds.binary_search(name).is_err()),
                );
                sort_unique(&mut definition);
            }
            self.scopes[id].definition_reads = definition.into_boxed_slice();
        }
        // Flat and exactly sized: summaries of a whole site-packages stay in memory at once, and
        // a Vec per name (or per scope list) would hold room for four entries where one is used.
        let mut bindings: Vec<(NameId, Binding)> = self.bindings;
        for (name, binding) in &mut bindings {
            *name = renumbered[*name as usize];
            if let Binding::Value { reads, edges, .. } = binding {
                for read in reads.iter_mut() {
                    *read = renumbered[*read as usize];
                }
                sort_unique(reads);
                reads.shrink_to_fit();
                edges.shrink_to_fit();
            }
        }
        // Stable: a name's bindings keep their source order.
        bindings.sort_by_key(|(id, _)| *id);
        let mut binding_offsets = Vec::with_capacity(order.len() + 1);
        let mut next = 0;
        for name in 0..=order.len() as NameId {
            while next < bindings.len() && bindings[next].0 < name {
                next += 1;
            }
            binding_offsets.push(next as u32);
        }
        let mut bindings: Vec<Binding> = bindings.into_iter().map(|(_, binding)| binding).collect();
        // A read of a name no module-level statement binds (a builtin, a typo) leads nowhere,
        // unless a star import may provide it: drop those reads now rather than follow them
        // in every closure that passes here.
        let star = order.binary_search_by(|&old| names[old as usize].cmp("*"));
        let star_bound = star.is_ok_and(|new| binding_offsets[new] < binding_offsets[new + 1]);
        if !star_bound {
            let bound = |name: &NameId| {
                binding_offsets[*name as usize] < binding_offsets[*name as usize + 1]
            };
            for scope in &mut self.scopes {
                scope.free_names = scope.free_names.iter().copied().filter(bound).collect();
                scope.definition_reads = scope
                    .definition_reads
                    .iter()
                    .copied()
                    .filter(bound)
                    .collect();
            }
            for binding in &mut bindings {
                if let Binding::Value { reads, .. } = binding {
                    reads.retain(bound);
                    reads.shrink_to_fit();
                }
            }
        }
        self.imports.shrink_to_fit();
        self.scopes.shrink_to_fit();
        let sorted_names = NameTable::from_sorted(order.iter().map(|&old| names[old as usize]));
        ModuleSummary {
            imports: self.imports,
            scopes: self.scopes,
            names: sorted_names,
            bindings,
            binding_offsets,
            problems: self.problems,
        }
    }

    /// Names a module-level simple statement binds, so its reads can be attached to them.
    fn bind_statement_targets(&mut self, stmt: &'a Stmt, line: u32, capture: StatementCapture) {
        let mut targets = Vec::new();
        match stmt {
            Stmt::Assign(assign) => assign
                .targets
                .iter()
                .for_each(|t| collect_target_names(t, &mut targets)),
            Stmt::AnnAssign(assign) => collect_target_names(&assign.target, &mut targets),
            Stmt::AugAssign(assign) => collect_target_names(&assign.target, &mut targets),
            Stmt::TypeAlias(alias) => collect_target_names(&alias.name, &mut targets),
            Stmt::For(for_stmt) => collect_target_names(&for_stmt.target, &mut targets),
            Stmt::With(with) => {
                for item in &with.items {
                    if let Some(vars) = &item.optional_vars {
                        collect_target_names(vars, &mut targets);
                    }
                }
            }
            _ => {}
        }
        // Walrus targets anywhere in the statement bind module globals too.
        targets.extend(capture_named_targets(stmt));
        let reads = capture.reads;
        for target in targets {
            let reads = reads.clone();
            let edges = capture.edges.clone();
            self.bind(target, || Binding::Value { line, reads, edges });
        }
    }
}

impl<'a> SourceOrderVisitor<'a> for Extractor<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => self.visit_import(import),
            Stmt::ImportFrom(import) => self.visit_import_from(import),
            Stmt::FunctionDef(def) => self.visit_function_def(def),
            Stmt::ClassDef(class) => self.visit_class_def(class),
            Stmt::If(if_stmt) => self.visit_if(if_stmt),
            Stmt::Try(try_stmt) => self.visit_try(try_stmt),
            Stmt::Global(global) => {
                for name in &global.names {
                    let id = self.intern(name.id.as_str());
                    self.builds[self.current as usize].globals.push(id);
                }
            }
            Stmt::While(while_stmt) => {
                self.visit_expr(&while_stmt.test);
                self.with_branch(false, |this| {
                    this.visit_body(&while_stmt.body);
                    this.visit_body(&while_stmt.orelse);
                });
            }
            Stmt::Match(match_stmt) => {
                self.visit_expr(&match_stmt.subject);
                self.with_branch(false, |this| {
                    for case in &match_stmt.cases {
                        this.visit_match_case(case);
                    }
                });
            }
            Stmt::For(for_stmt) if self.current == 0 && self.capture.is_none() => {
                let line = self.line(for_stmt.start());
                self.capture = Some(StatementCapture::default());
                self.visit_expr(&for_stmt.iter);
                self.visit_expr(&for_stmt.target);
                let capture = self.capture.take().unwrap_or_default();
                self.bind_statement_targets(stmt, line, capture);
                self.with_branch(false, |this| {
                    this.visit_body(&for_stmt.body);
                    this.visit_body(&for_stmt.orelse);
                });
            }
            Stmt::With(with) if self.current == 0 && self.capture.is_none() => {
                let line = self.line(with.start());
                self.capture = Some(StatementCapture::default());
                for item in &with.items {
                    self.visit_with_item(item);
                }
                let capture = self.capture.take().unwrap_or_default();
                self.bind_statement_targets(stmt, line, capture);
                self.visit_body(&with.body);
            }
            Stmt::Assign(_)
            | Stmt::AnnAssign(_)
            | Stmt::AugAssign(_)
            | Stmt::TypeAlias(_)
            | Stmt::Expr(_)
                if self.current == 0 && self.capture.is_none() =>
            {
                let line = self.line(stmt.start());
                self.capture = Some(StatementCapture::default());
                source_order::walk_stmt(self, stmt);
                let capture = self.capture.take().unwrap_or_default();
                self.bind_statement_targets(stmt, line, capture);
            }
            _ => source_order::walk_stmt(self, stmt),
        }
    }

    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Name(name) => match name.ctx {
                ast::ExprContext::Load => self.record_load(name.id.as_str()),
                ast::ExprContext::Store => {
                    self.record_bind(name.id.as_str());
                }
                _ => {}
            },
            Expr::Call(call) => {
                self.record_dynamic_import(call);
                source_order::walk_expr(self, expr);
            }
            Expr::Lambda(_) => self.visit_scoped_expr(ScopeKind::Lambda, expr),
            Expr::ListComp(_) | Expr::SetComp(_) | Expr::DictComp(_) | Expr::Generator(_) => {
                self.visit_scoped_expr(ScopeKind::Comprehension, expr)
            }
            _ => source_order::walk_expr(self, expr),
        }
    }
}

fn sort_unique(ids: &mut Vec<NameId>) {
    ids.sort_unstable();
    ids.dedup();
}

fn catches_import_error(expr: &Expr) -> bool {
    match expr {
        Expr::Name(name) => IMPORT_GUARDS.contains(&name.id.as_str()),
        Expr::Attribute(attribute) => IMPORT_GUARDS.contains(&attribute.attr.id.as_str()),
        Expr::Tuple(tuple) => tuple.elts.iter().any(catches_import_error),
        _ => false,
    }
}

fn collect_target_names<'a>(target: &'a Expr, out: &mut Vec<&'a str>) {
    match target {
        Expr::Name(name) => out.push(name.id.as_str()),
        Expr::Tuple(tuple) => tuple.elts.iter().for_each(|e| collect_target_names(e, out)),
        Expr::List(list) => list.elts.iter().for_each(|e| collect_target_names(e, out)),
        Expr::Starred(starred) => collect_target_names(&starred.value, out),
        _ => {}
    }
}

fn capture_named_targets(stmt: &Stmt) -> Vec<&str> {
    struct Walrus<'b>(Vec<&'b str>);
    impl<'b> SourceOrderVisitor<'b> for Walrus<'b> {
        fn visit_expr(&mut self, expr: &'b Expr) {
            if let Expr::Named(named) = expr {
                collect_target_names(&named.target, &mut self.0);
            }
            source_order::walk_expr(self, expr);
        }
    }
    let mut walrus = Walrus(Vec::new());
    walrus.visit_stmt(stmt);
    walrus.0
}

/// `importlib.import_module(".b", "pkg.a")` with level 1 -> `pkg.a.b`.
fn join_relative(package: &str, level: u32, module: &str) -> String {
    let mut parts: Vec<&str> = package.split('.').filter(|p| !p.is_empty()).collect();
    for _ in 1..level {
        parts.pop();
    }
    if !module.is_empty() {
        parts.push(module);
    }
    parts.join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_table_finds_every_name_and_nothing_else() {
        let names = ["*", "Model", "_x", "a", "ab", "b", "ébé"];
        let table = NameTable::from_sorted(names);
        assert_eq!(table.len(), names.len());
        for (id, name) in names.iter().enumerate() {
            assert_eq!(table.get(id as NameId), *name);
            assert_eq!(table.find(name), Some(id as NameId));
        }
        for absent in ["", "A", "aa", "c", "é"] {
            assert_eq!(table.find(absent), None, "{absent:?}");
        }
        assert_eq!(NameTable::default().find("a"), None);
    }
}
