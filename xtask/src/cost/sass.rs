//! Reading `cuobjdump -sass`: the instructions of each function, the pipe each issues to, and the
//! loops that stream a row (a backward branch whose body holds global loads), counted along one
//! iteration.

/// The pipes (and instruction classes) an iteration is counted by. The order is the columns'.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pipe {
    /// FFMA, FADD, FMUL, FMNMX, FSETP, FSEL and the packed half-precision forms.
    Fp32,
    /// IADD3, LOP3, SHF, ISETP, LEA, SEL, PRMT...: the ALU pipe.
    Int,
    /// IMAD, IMUL, IDP: integer multiplies, which the FMA pipe runs (not the ALU) from sm_70
    /// on, beside FP32 (see `hardware.rs`, [`IMAD_SOURCE`](super::hardware)).
    Imad,
    /// The special-function unit: MUFU (log2, exp2, rcp, rsqrt...).
    Mufu,
    /// DADD, DFMA, DMUL, DSETP...
    Fp64,
    /// Conversions: F2F, F2I, I2F, FRND.
    Conv,
    /// Global loads (LDG), and their bytes apart.
    Ldg,
    /// Global stores and atomics (STG, RED, ATOMG).
    Stg,
    /// Shared memory: LDS, STS, ATOMS.
    Shared,
    /// SHFL.
    Shfl,
    /// BAR.
    Bar,
    /// Everything else (moves, branches, uniform-datapath and special-register reads).
    Other,
}

pub const PIPES: [Pipe; 12] = [
    Pipe::Fp32,
    Pipe::Int,
    Pipe::Imad,
    Pipe::Mufu,
    Pipe::Fp64,
    Pipe::Conv,
    Pipe::Ldg,
    Pipe::Stg,
    Pipe::Shared,
    Pipe::Shfl,
    Pipe::Bar,
    Pipe::Other,
];

impl Pipe {
    pub fn name(self) -> &'static str {
        ["fp32", "int", "imad", "mufu", "fp64", "conv", "ldg", "stg", "shared", "shfl", "bar", "other"][self as usize]
    }

    /// The pipe of an opcode (its mnemonic before the first `.`).
    fn of(opcode: &str) -> Pipe {
        let base = opcode.split('.').next().unwrap_or(opcode);
        match base {
            "FFMA" | "FADD" | "FMUL" | "FMNMX" | "FSETP" | "FSEL" | "FSET" | "FCHK" | "FSWZADD" | "HADD2" | "HMUL2"
            | "HFMA2" | "HSETP2" | "HMNMX2" => Pipe::Fp32,
            "IADD3" | "IADD" | "VIADD" | "LOP3" | "LOP" | "SHF" | "SHL" | "SHR" | "ISETP" | "IMNMX" | "VIMNMX"
            | "IABS" | "LEA" | "SEL" | "PRMT" | "POPC" | "FLO" | "BREV" | "BMSK" | "SGXT" | "ICMP" | "PLOP3"
            | "P2R" | "R2P" | "IMMA" => Pipe::Int,
            "IMAD" | "IMUL" | "IDP" => Pipe::Imad,
            "MUFU" => Pipe::Mufu,
            "DADD" | "DFMA" | "DMUL" | "DSETP" | "DMNMX" => Pipe::Fp64,
            "F2F" | "F2I" | "I2F" | "I2FP" | "F2IP" | "FRND" | "F2FP" => Pipe::Conv,
            "LDG" => Pipe::Ldg,
            "STG" | "RED" | "ATOMG" | "ATOM" => Pipe::Stg,
            "LDS" | "STS" | "ATOMS" | "LDSM" => Pipe::Shared,
            "SHFL" => Pipe::Shfl,
            "BAR" => Pipe::Bar,
            _ => Pipe::Other,
        }
    }
}

/// Instructions counted by pipe, and the bytes the global loads among them read.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    pub by_pipe: [f64; PIPES.len()],
    pub load_bytes: f64,
    /// Global-load round trips one after the other: the basic blocks holding loads (a load
    /// behind a branch cannot be issued before the branch is decided, so it waits for the
    /// previous block's).
    pub round_trips: f64,
    /// `MUFU.LG2`: the logs (the race's noise takes them; a pruned column does not).
    pub logs: f64,
    /// Philox's multiplies by its first constant, ten a block (a pruned quad takes none).
    pub philox: f64,
    /// The IR's exact logs (`math::log`, by its last series coefficient): a column's exact race
    /// score takes two (a screened-out column none).
    pub exact_logs: f64,
    /// The IR's exact exponentials (`math::exp`, by its first series coefficient): a column's
    /// weight takes one (a column far below the maximum, which weighs 0, none).
    pub exact_exps: f64,
    /// Adds of a 64-bit sum's high words (`IMAD.X`, `IADD3.X`): a column's fixed-point mass
    /// (a column of zero weight adds none).
    pub carries: f64,
    /// Adds of a value to workgroup memory (`ATOMS.ADD`): a histogram's masses.
    pub mass_atomics: f64,
    /// Words loaded from workgroup memory (`LDS`, a vector load counting each): the items an
    /// on-chip loop's iteration visits.
    pub shared_loads: f64,
    /// Stores to workgroup memory (`STS`): a select's listing of its keys.
    pub shared_stores: f64,
}

impl Counts {
    pub fn get(&self, p: Pipe) -> f64 {
        self.by_pipe[p as usize]
    }
    pub fn total(&self) -> f64 {
        self.by_pipe.iter().sum()
    }
    fn add(&mut self, i: &Instr) {
        self.by_pipe[i.pipe as usize] += 1.0;
        self.load_bytes += i.load_bytes as f64;
        self.logs += f64::from(u8::from(i.log));
        self.philox += f64::from(u8::from(i.philox));
        self.exact_logs += f64::from(u8::from(i.exact_log));
        self.exact_exps += f64::from(u8::from(i.exact_exp));
        self.carries += f64::from(u8::from(i.carry));
        self.mass_atomics += f64::from(u8::from(i.mass_atomic));
        self.shared_loads += f64::from(i.shared_words);
        self.shared_stores += f64::from(u8::from(i.shared_store));
    }
    /// These counts times `k`.
    pub fn scaled(&self, k: f64) -> Counts {
        Counts {
            by_pipe: self.by_pipe.map(|c| c * k),
            load_bytes: self.load_bytes * k,
            round_trips: self.round_trips * k,
            logs: self.logs * k,
            philox: self.philox * k,
            exact_logs: self.exact_logs * k,
            exact_exps: self.exact_exps * k,
            carries: self.carries * k,
            mass_atomics: self.mass_atomics * k,
            shared_loads: self.shared_loads * k,
            shared_stores: self.shared_stores * k,
        }
    }
    pub fn plus(&self, o: &Counts) -> Counts {
        let mut by_pipe = self.by_pipe;
        for (a, b) in by_pipe.iter_mut().zip(o.by_pipe) {
            *a += b;
        }
        Counts {
            by_pipe,
            load_bytes: self.load_bytes + o.load_bytes,
            round_trips: self.round_trips + o.round_trips,
            logs: self.logs + o.logs,
            philox: self.philox + o.philox,
            exact_logs: self.exact_logs + o.exact_logs,
            exact_exps: self.exact_exps + o.exact_exps,
            carries: self.carries + o.carries,
            mass_atomics: self.mass_atomics + o.mass_atomics,
            shared_loads: self.shared_loads + o.shared_loads,
            shared_stores: self.shared_stores + o.shared_stores,
        }
    }
}

/// One SASS instruction.
#[derive(Debug)]
struct Instr {
    addr: u32,
    pipe: Pipe,
    /// Bytes a global load reads per thread (0 for anything else).
    load_bytes: u32,
    /// `MUFU.LG2`.
    log: bool,
    /// A multiply by Philox's first constant (`0xD2511F53`, printed as `-0x2daee0ad`).
    philox: bool,
    /// A multiply by the exact log's last series coefficient (`0x3e789e26`, printed
    /// `0.24279078841209411621`; the model compiles without FMA contraction, so a `FMUL`).
    exact_log: bool,
    /// A multiply by the exact exponential's first series coefficient (`math::exp`,
    /// `0.0001984127`, printed `0.00019841270113829523325`).
    exact_exp: bool,
    /// `IMAD.X` or `IADD3.X`: the high word of a 64-bit add.
    carry: bool,
    /// `ATOMS.ADD`: an add of a value to workgroup memory (a histogram bin's mass; an add of 1
    /// is `ATOMS.POPC.INC`, which is no such add).
    mass_atomic: bool,
    /// `LDS`: a workgroup-memory load.
    shared_words: u8,
    shared_store: bool,
    /// Where a branch goes, if it is one.
    target: Option<u32>,
    /// Where a `CALL` goes, if it is one.
    call: Option<u32>,
    /// `RET`: the end of a called subroutine.
    ret: bool,
    /// A branch, `EXIT` or `RET` without a predicate: nothing falls through.
    ends_flow: bool,
    /// The registers it writes (a global load's destination; empty for a store or a branch)
    /// and those it reads, by number.
    writes: Vec<u16>,
    reads: Vec<u16>,
}

/// The general registers (`R12`, not `RZ` or `UR4`) an instruction writes and reads: its first
/// operand is written (and its next ones, for a load of 8 or 16 bytes), but by a store,
/// which reads every operand; the rest are read.
fn registers(base: &str, operands: &str, load_bytes: u32) -> (Vec<u16>, Vec<u16>) {
    let number = |t: &str| -> Vec<u16> {
        let mut found = Vec::new();
        let b = t.as_bytes();
        for (k, w) in t.char_indices() {
            let starts = w == 'R' && (k == 0 || !(b[k - 1] as char).is_ascii_alphanumeric());
            if starts {
                let digits: String = t[k + 1..].chars().take_while(|c| c.is_ascii_digit()).collect();
                if let Ok(r) = digits.parse() {
                    found.push(r);
                }
            }
        }
        found
    };
    let ops: Vec<&str> = operands.split(',').map(str::trim).filter(|o| !o.is_empty()).collect();
    let stores = matches!(base, "STG" | "STS" | "STL" | "ST" | "RED" | "ATOMS" | "ATOMG" | "ATOM" | "BRA" | "EXIT");
    match ops.split_first() {
        Some((first, rest)) if !stores => {
            let mut writes = number(first);
            if let Some(&r) = writes.first() {
                writes.extend((1..(load_bytes / 4).max(1) as u16).map(|k| r + k));
            }
            (writes, rest.iter().flat_map(|o| number(o)).collect())
        }
        _ => (Vec::new(), ops.iter().flat_map(|o| number(o)).collect()),
    }
}

/// A kernel's code.
pub struct Function {
    pub name: String,
    instrs: Vec<Instr>,
}

/// `LDG.E.128` reads 16 bytes, `LDG.E.U16` 2, `LDG.E.64` 8, a plain `LDG.E` 4.
fn load_width(opcode: &str) -> u32 {
    let mods: Vec<&str> = opcode.split('.').skip(1).collect();
    for (m, bytes) in [("128", 16), ("64", 8), ("U16", 2), ("S16", 2), ("U8", 1), ("S8", 1)] {
        if mods.contains(&m) {
            return bytes;
        }
    }
    4
}

/// One line of `cuobjdump -sass`: `/*0230*/  @!P3 LDG.E.CONSTANT R16, desc[UR6][R16.64] ;`.
fn parse_line(line: &str) -> Option<Instr> {
    let rest = line.trim_start().strip_prefix("/*")?;
    let (addr, rest) = rest.split_once("*/")?;
    let addr = u32::from_str_radix(addr, 16).ok()?;
    let text = rest.split(';').next()?.trim();
    let mut words = text.split_whitespace();
    let mut opcode = words.next()?;
    let predicated = opcode.starts_with('@');
    if predicated {
        opcode = words.next()?;
    }
    let pipe = Pipe::of(opcode);
    let base = opcode.split('.').next().unwrap_or(opcode);
    let last_address =
        || text.split_whitespace().last().and_then(|t| u32::from_str_radix(t.trim_start_matches("0x"), 16).ok());
    let target = if base == "BRA" { last_address() } else { None };
    let call = if base == "CALL" { last_address() } else { None };
    let ret = base == "RET";
    let ends_flow = !predicated && matches!(base, "BRA" | "EXIT" | "RET" | "BRX" | "JMP");
    let load_bytes = if pipe == Pipe::Ldg { load_width(opcode) } else { 0 };
    let log = opcode.starts_with("MUFU.LG2");
    let philox = base == "IMAD" && text.contains("-0x2daee0ad");
    let exact_log = base == "FMUL" && text.contains("0.24279078841209411621");
    let exact_exp = base == "FMUL" && text.contains("0.00019841270113829523325");
    let carry = matches!(base, "IMAD" | "IADD3") && opcode.split('.').any(|m| m == "X");
    let mass_atomic = opcode.starts_with("ATOMS.ADD");
    // A vector load from workgroup memory reads several keys: a loop's visits count words.
    let shared_words = if base == "LDS" { (load_width(opcode) / 4).max(1) as u8 } else { 0 };
    let shared_store = base == "STS";
    let operands = text.splitn(if predicated { 3 } else { 2 }, char::is_whitespace).last().unwrap_or("");
    let (writes, mut reads) = registers(base, operands, load_bytes);
    // A predicated instruction does not write its destination where the predicate is false.
    if predicated {
        reads.extend(writes.iter().copied());
    }
    Some(Instr {
        addr,
        pipe,
        load_bytes,
        log,
        philox,
        exact_log,
        exact_exp,
        carry,
        mass_atomic,
        shared_words,
        shared_store,
        target,
        call,
        ret,
        ends_flow,
        writes,
        reads,
    })
}

/// The functions of a `cuobjdump -sass` listing.
pub fn parse(text: &str) -> Vec<Function> {
    let mut functions: Vec<Function> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.trim().strip_prefix("Function : ") {
            functions.push(Function { name: name.trim().to_string(), instrs: Vec::new() });
        } else if let (Some(f), Some(i)) = (functions.last_mut(), parse_line(line)) {
            f.instrs.push(i);
        }
    }
    functions
}

/// A loop that streams a row: one iteration counted along its cheapest path that still makes
/// every load of the iteration (the common path), along the cheapest such path that takes a log
/// where the common one takes none (the kept path: the race's pruning skips a column's noise,
/// so its common path is a pruned column's), along the cheapest that draws a Philox block where
/// the common one draws none (the noised path: a kept quad whose columns the noise bound all
/// skip, so it takes no log), along the cheapest that adds a 64-bit sum where the common one
/// adds none (the massed path: a column of nonzero weight, where the common path skips a
/// column of zero weight), along the cheapest that takes an exact log where the common one
/// takes none (the scored path: a raced column of the top-p cut that its noise bound does not
/// rule out, its exact score beyond the noised path), and along its most expensive one (the
/// difference is what its rarely taken branches cost when they are taken).
#[derive(Clone, Debug)]
pub struct Loop {
    pub start: u32,
    pub end: u32,
    pub common: Counts,
    pub kept: Option<Counts>,
    pub noised: Option<Counts>,
    pub massed: Option<Counts>,
    pub scored: Option<Counts>,
    pub longest: Counts,
}

/// What a path must pass through, in order (see [`Loop`]): none of them is `&[]`.
#[derive(Clone, Copy, PartialEq)]
enum Through {
    Log,
    Philox,
    Carry,
    ExactLog,
    ExactExp,
    MassAtomic,
}

const ANYTHING: &[Through] = &[];

impl Loop {
    /// What the branches off the common path add to an iteration when all are taken.
    pub fn rare(&self) -> Counts {
        self.longest.plus(&self.common.scaled(-1.0))
    }
}

/// A loop over workgroup memory: an innermost backward branch whose body reads workgroup memory
/// and no global memory (a part's sum, select, gather), counted along its cheapest path (an
/// item that takes no branch: a select's key that does not match the prefix; in a loop that
/// sums floats, its costliest: every column with a value weighs itself) and its costliest
/// (one that takes them all). `pass` is where it runs inside a pass of a select: the loop around
/// it that holds a barrier, counted along its cheapest path without this loop's instructions
/// (the block-wide sums and the digit's choice, once a pass a thread).
#[derive(Clone, Debug)]
pub struct OnChip {
    pub start: u32,
    pub common: Counts,
    /// The items an iteration visits: the words its cheapest path loads from workgroup memory
    /// (a load behind a branch, such as a probability's lookup of its bin's edge, is no item).
    pub visits: f64,
    pub longest: Counts,
    /// In a loop that sums floats and adds masses to workgroup memory (a top-p part's
    /// histograms): its cheapest path through as many of those adds as its costliest takes,
    /// each item weighed into its coarse bin and into no finer one.
    pub weighed: Option<Counts>,
    pub pass: Option<Counts>,
    /// In a loop that draws Philox blocks (a min-p part's race over its band): its cheapest
    /// path that draws one, and its cheapest that also scores a key exactly (an exact log).
    pub raced: Option<(Counts, Counts)>,
}

/// A path's rank: most loads first, then fewest (or most) instructions.
type Rank = (u32, f64);

/// Whether `a` beats `b` as the cheapest path: more loads, or as many and fewer instructions.
fn cheapest(a: Rank, b: Rank) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 < b.1)
}

/// Whether `a` beats `b` as the costliest path: more loads, or as many and more instructions.
fn costliest(a: Rank, b: Rank) -> bool {
    a.0 > b.0 || (a.0 == b.0 && a.1 > b.1)
}

impl Function {
    /// The instruction index at `addr`.
    fn index(&self, addr: u32) -> Option<usize> {
        self.instrs.binary_search_by_key(&addr, |i| i.addr).ok()
    }

    /// Every backward branch as a loop `[target, branch]`.
    fn back_edges(&self) -> Vec<(usize, usize)> {
        let mut edges: Vec<(usize, usize)> = self
            .instrs
            .iter()
            .enumerate()
            .filter_map(|(at, i)| {
                let to = self.index(i.target?)?;
                (to <= at).then_some((to, at))
            })
            .collect();
        edges.sort_unstable();
        edges.dedup();
        edges
    }

    /// The loops that stream a row: backward branches whose body loads from global memory and
    /// holds no smaller such loop (the row loop around a kernel's passes is not one; each pass's
    /// column loop is).
    pub fn streaming_loops(&self) -> Vec<Loop> {
        let loads = |(s, e): (usize, usize)| self.instrs[s..=e].iter().any(|i| i.pipe == Pipe::Ldg);
        let candidates: Vec<(usize, usize)> = self.back_edges().into_iter().filter(|&r| loads(r)).collect();
        let holds_smaller =
            |(s, e): (usize, usize)| candidates.iter().any(|&(a, b)| (a, b) != (s, e) && s <= a && b <= e);
        candidates
            .iter()
            .filter(|&&r| !holds_smaller(r))
            .filter_map(|&(s, e)| {
                let common = self.path((s, e), &cheapest, ANYTHING)?;
                let kept = if common.logs == 0.0 { self.path((s, e), &cheapest, &[Through::Log]) } else { None };
                let noised = if common.philox == 0.0 { self.path((s, e), &cheapest, &[Through::Philox]) } else { None };
                // A column's mass is its weight's (the exact exponential's, where the loop has
                // one: a branch that weighs a row's limits without it is no column's path).
                let weighs = self.instrs[s..=e].iter().any(|i| i.exact_exp);
                let mass: &[Through] = if weighs { &[Through::ExactExp, Through::Carry] } else { &[Through::Carry] };
                let massed = if common.carries == 0.0 { self.path((s, e), &cheapest, mass) } else { None };
                let scored =
                    if common.exact_logs == 0.0 { self.path((s, e), &cheapest, &[Through::ExactLog]) } else { None };
                let longest = self.path((s, e), &costliest, ANYTHING)?;
                let (start, end) = (self.instrs[s].addr, self.instrs[e].addr);
                Some(Loop { start, end, common, kept, noised, massed, scored, longest })
            })
            .collect()
    }

    /// The loops over workgroup memory ([`OnChip`]), in code order.
    pub fn onchip_loops(&self) -> Vec<OnChip> {
        let edges = self.back_edges();
        let any = |(s, e): (usize, usize), f: &dyn Fn(&Instr) -> bool| self.instrs[s..=e].iter().any(f);
        let inside = |(a, b): (usize, usize), (s, e): (usize, usize)| (a, b) != (s, e) && s <= a && b <= e;
        edges
            .iter()
            .filter(|&&r| any(r, &|i| i.shared_words > 0) && !any(r, &|i| i.pipe == Pipe::Ldg))
            .filter(|&&r| !edges.iter().any(|&o| inside(o, r)))
            .filter_map(|&(s, e)| {
                let longest = self.path((s, e), &costliest, ANYTHING)?;
                // A loop that sums floats (a part's weights): every column with a value weighs
                // itself, the whole exponential, and adds its term.
                let sums = any((s, e), &|i| i.pipe == Pipe::Fp32);
                let cheapest_path = self.path((s, e), &cheapest, ANYTHING)?;
                let visits = cheapest_path.shared_loads.max(1.0);
                // A race's keys mostly lie outside the band (or are ruled out by their noise
                // bound): its common path is the cheapest, its raced paths apart.
                let raced = (longest.philox > 0.0)
                    .then(|| {
                        let noised = self.path((s, e), &cheapest, &[Through::Philox])?;
                        Some((noised, self.path((s, e), &cheapest, &[Through::Philox, Through::ExactLog])?))
                    })
                    .flatten();
                let common = if sums && raced.is_none() { longest } else { cheapest_path };
                let around = edges
                    .iter()
                    .filter(|&&o| {
                        inside((s, e), o) && any(o, &|i| i.pipe == Pipe::Bar) && !any(o, &|i| i.pipe == Pipe::Ldg)
                    })
                    .min_by_key(|&&(a, b)| b - a);
                let pass =
                    around.and_then(|&(a, b)| self.path_to(a, b, &|k| k == b, &cheapest, ANYTHING, 0, Some((s, e))));
                let adds = longest.mass_atomics as usize;
                let weighed = (sums && adds > 0)
                    .then(|| self.path((s, e), &cheapest, &vec![Through::MassAtomic; adds]))
                    .flatten();
                Some(OnChip { start: self.instrs[s].addr, common, visits, longest, weighed, pass, raced })
            })
            .collect()
    }

    /// The counts along the best path, by `better`, from the loop's head to its backward branch
    /// (the best of those that pass through what `through` names). Inside the body, forward branches and
    /// fall-through are followed; branches out of the body and inner backward branches are not
    /// (a path leaving the body is no iteration).
    fn path(&self, (s, e): (usize, usize), better: &dyn Fn(Rank, Rank) -> bool, through: &[Through]) -> Option<Counts> {
        self.path_to(s, e, &|k| k == e, better, through, 0, None)
    }

    /// The best path from `s` to an instruction at or before `e` that `end` accepts, among those
    /// that pass through what `through` names; a `CALL` on it counts the called subroutine's best
    /// path to its `RET` (`depth` bounds the nesting). Each instruction is reached in two states,
    /// with and without the mark on the way there, so the best path of either kind is found in
    /// one sweep. The instructions of `skip` (an index range) are passed through and not counted.
    #[allow(clippy::too_many_arguments)]
    fn path_to(
        &self,
        s: usize,
        e: usize,
        end: &dyn Fn(usize) -> bool,
        better: &dyn Fn(Rank, Rank) -> bool,
        through: &[Through],
        depth: u32,
        skip: Option<(usize, usize)>,
    ) -> Option<Counts> {
        let skipped = |k: usize| skip.is_some_and(|(a, b)| a <= k && k <= b);
        let n = e - s + 1;
        let callee = |i: &Instr| -> Counts {
            match i.call.and_then(|t| self.index(t)) {
                Some(t) if depth < 4 => self
                    .path_to(t, self.instrs.len() - 1, &|k| self.instrs[k].ret, better, ANYTHING, depth + 1, None)
                    .unwrap_or_default(),
                _ => Counts::default(),
            }
        };
        // (loads, cost, the state after it: how many of `through` the path has passed, in order)
        let weight = |at: usize, state: usize| {
            if skipped(at) {
                return (0, 0.0, state);
            }
            let i = &self.instrs[at];
            let called = callee(i);
            let marked = |t: Through| match t {
                Through::Log => i.log || called.logs > 0.0,
                Through::Philox => i.philox || called.philox > 0.0,
                Through::Carry => i.carry || called.carries > 0.0,
                Through::ExactLog => i.exact_log || called.exact_logs > 0.0,
                Through::ExactExp => i.exact_exp || called.exact_exps > 0.0,
                Through::MassAtomic => i.mass_atomic || called.mass_atomics > 0.0,
            };
            let next = state + usize::from(through.get(state).is_some_and(|&t| marked(t)));
            (i.load_bytes, 1.0 + called.total(), next)
        };
        let states = through.len() + 1;
        let mut best: Vec<Vec<Option<Rank>>> = vec![vec![None; states]; n];
        let mut from: Vec<Vec<(usize, usize)>> = vec![vec![(usize::MAX, 0); states]; n];
        let (l0, c0, g0) = weight(s, 0);
        best[0][g0] = Some((l0, c0));
        let mut done: Option<(usize, usize)> = None;
        for k in 0..n {
            for state in 0..states {
                let Some((loads, cost)) = best[k][state] else { continue };
                if end(s + k) {
                    let allowed = state == through.len();
                    let beats = |(d, ds): (usize, usize)| better((loads, cost), best[d][ds].expect("reached"));
                    if allowed && done.is_none_or(beats) {
                        done = Some((k, state));
                    }
                    continue;
                }
                let i = &self.instrs[s + k];
                let mut next = Vec::with_capacity(2);
                if !i.ends_flow {
                    next.push(k + 1);
                }
                if let Some(t) = i.target.and_then(|t| self.index(t)) {
                    if t > s + k && t <= e {
                        next.push(t - s);
                    }
                }
                for j in next.into_iter().filter(|&j| j < n) {
                    let (l, c, to) = weight(s + j, state);
                    let cand = (loads + l, cost + c);
                    if best[j][to].is_none_or(|old| better(cand, old)) {
                        best[j][to] = Some(cand);
                        from[j][to] = (k, state);
                    }
                }
            }
        }
        let mut path = vec![done?];
        while let Some(&(k, state)) = path.last().filter(|&&(k, _)| k != 0) {
            path.push(from[k][state]);
        }
        let path: Vec<usize> = path.into_iter().rev().map(|(k, _)| k).collect();
        let mut counts = Counts::default();
        // The registers loaded in the current round trip, and whether the path has used one
        // since it began: a load issued after such a use waits for the round trip before it.
        let mut loaded: Vec<u16> = Vec::new();
        let mut waited = true;
        for &k in &path {
            if skipped(s + k) {
                continue;
            }
            let i = &self.instrs[s + k];
            if i.reads.iter().any(|r| loaded.contains(r)) {
                waited = true;
            }
            if i.pipe == Pipe::Ldg {
                if waited {
                    counts.round_trips += 1.0;
                    waited = false;
                    loaded.clear();
                }
                loaded.extend(i.writes.iter().copied());
            } else {
                loaded.retain(|r| !i.writes.contains(r));
            }
            counts.add(i);
            counts = counts.plus(&callee(i));
        }
        Some(counts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
        Function : k
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.128 R4, desc[UR6][R2.64] ;
        /*0020*/               @P0 BRA 0x50 ;
        /*0030*/                   MUFU.LG2 R5, R4 ;
        /*0040*/                   FFMA R5, R5, R4, R4 ;
        /*0050*/                   IADD3 R2, R2, 0x10, RZ ;
        /*0060*/               @P1 BRA 0x10 ;
        /*0070*/                   EXIT ;
    ";

    #[test]
    fn finds_the_loop_and_its_paths() {
        let f = &parse(LISTING)[0];
        let loops = f.streaming_loops();
        assert_eq!(loops.len(), 1);
        let l = &loops[0];
        assert_eq!((l.start, l.end), (0x10, 0x60));
        assert_eq!(l.common.total(), 4.0);
        assert_eq!(l.common.load_bytes, 16.0);
        assert_eq!(l.common.round_trips, 1.0);
        assert_eq!(l.rare().get(Pipe::Mufu), 1.0);
        assert_eq!(l.rare().get(Pipe::Fp32), 1.0);
        // The common path skips the log, so the kept path is the one through it.
        let kept = l.kept.expect("a path with the log");
        assert_eq!((kept.total(), kept.logs), (6.0, 1.0));
        assert!(l.noised.is_none(), "no Philox in the listing");
    }

    /// A select's pass: a key loop over workgroup memory (a key that matches takes two more
    /// instructions) inside a loop with a barrier; a streaming loop after it is not on chip.
    #[test]
    fn finds_the_onchip_loop_and_its_pass() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   MOV R3, RZ ;
            /*0020*/                   LDS R4, [R2] ;
            /*0030*/               @P0 BRA 0x60 ;
            /*0040*/                   IADD3 R5, R5, 0x1, RZ ;
            /*0050*/                   IADD3 R6, R6, 0x1, RZ ;
            /*0060*/                   IADD3 R2, R2, 0x400, RZ ;
            /*0070*/               @P1 BRA 0x20 ;
            /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
            /*0090*/                   SHFL.BFLY PT, R7, R5, 0x1, 0x1f ;
            /*00a0*/               @P2 BRA 0x10 ;
            /*00b0*/                   LDG.E R4, desc[UR6][R2.64] ;
            /*00c0*/                   LDS R8, [R2] ;
            /*00d0*/               @P3 BRA 0xb0 ;
            /*00e0*/                   EXIT ;
        ";
        let f = &parse(listing)[0];
        let loops = f.onchip_loops();
        assert_eq!(loops.len(), 1, "the loop with a global load is not on chip");
        let l = &loops[0];
        assert_eq!(l.start, 0x20);
        assert_eq!((l.common.total(), l.common.shared_loads), (4.0, 1.0));
        assert_eq!(l.longest.total(), 6.0);
        // The pass: its head, the barrier, the shuffle and its branch, without the key loop.
        let pass = l.pass.expect("inside a loop with a barrier");
        assert_eq!((pass.total(), pass.get(Pipe::Bar), pass.shared_loads), (4.0, 1.0, 0.0));
    }

    /// A kept quad's block, then a column's log behind its own branch: the noised path draws
    /// the block and skips the log; the kept path takes both.
    #[test]
    fn finds_the_noised_path() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   LDG.E R4, desc[UR6][R2.64] ;
            /*0020*/               @P0 BRA 0x70 ;
            /*0030*/                   IMAD.WIDE.U32 R6, R6, -0x2daee0ad, RZ ;
            /*0040*/               @P2 BRA 0x70 ;
            /*0050*/                   MUFU.LG2 R5, R4 ;
            /*0060*/                   FFMA R5, R5, R4, R4 ;
            /*0070*/                   IADD3 R2, R2, 0x10, RZ ;
            /*0080*/               @P1 BRA 0x10 ;
            /*0090*/                   EXIT ;
        ";
        let l = &parse(listing)[0].streaming_loops()[0];
        assert_eq!((l.common.total(), l.common.philox), (4.0, 0.0));
        let noised = l.noised.expect("a path through the block");
        assert_eq!((noised.total(), noised.philox, noised.logs), (6.0, 1.0, 0.0));
        let kept = l.kept.expect("a path with the log");
        assert_eq!((kept.total(), kept.philox, kept.logs), (8.0, 1.0, 1.0));
    }

    /// A column of zero weight skips its body (the common path); the cheapest path that adds
    /// its mass to a 64-bit sum takes the class of two instructions (`IADD3.X`), not the one of
    /// three (`IMAD.X` and a jump); an address's `IMAD.WIDE` is no such add.
    #[test]
    fn finds_the_massed_path() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   IMAD.WIDE.U32 R2, R0, 0x4, R2 ;
            /*0020*/                   LDG.E R4, desc[UR6][R2.64] ;
            /*0030*/               @!P0 BRA 0xa0 ;
            /*0040*/               @P2 BRA 0x80 ;
            /*0050*/                   IADD3 R40, P3, R23, R40, RZ ;
            /*0060*/                   IMAD.X R41, R24, 0x1, R41, P3 ;
            /*0070*/                   BRA 0xa0 ;
            /*0080*/                   IADD3 R42, P3, R23, R42, RZ ;
            /*0090*/                   IADD3.X R43, R24, R43, RZ, P3, !PT ;
            /*00a0*/                   IADD3 R0, R0, 0x100, RZ ;
            /*00b0*/               @P1 BRA 0x10 ;
            /*00c0*/                   EXIT ;
        ";
        let l = &parse(listing)[0].streaming_loops()[0];
        assert_eq!((l.common.total(), l.common.carries), (5.0, 0.0));
        let massed = l.massed.expect("a path through a 64-bit add");
        assert_eq!((massed.total(), massed.carries), (8.0, 1.0));
    }
    /// A weight whose series a branch can skip (the softmax's limit, a row whose largest is
    /// +inf, weighs 1 without it): the massed path of a loop with the exact exponential takes
    /// the series before the 64-bit add, not the shorter way round it.
    #[test]
    fn the_massed_path_weighs_its_column() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   LDG.E R4, desc[UR6][R2.64] ;
            /*0020*/               @P0 BRA 0x60 ;
            /*0030*/                   FMUL R5, R4, 0.00019841270113829523325 ;
            /*0040*/                   FADD R5, R5, 0.0013888889225199818611 ;
            /*0050*/                   BRA 0x70 ;
            /*0060*/                   MOV R5, 0x3f800000 ;
            /*0070*/               @!P2 BRA 0xa0 ;
            /*0080*/                   IADD3 R42, P3, R5, R42, RZ ;
            /*0090*/                   IADD3.X R43, RZ, R43, RZ, P3, !PT ;
            /*00a0*/                   IADD3 R2, R2, 0x10, RZ ;
            /*00b0*/               @P1 BRA 0x10 ;
            /*00c0*/                   EXIT ;
        ";
        let l = &parse(listing)[0].streaming_loops()[0];
        assert_eq!((l.common.total(), l.common.exact_exps), (6.0, 0.0));
        let massed = l.massed.expect("a path through the series and a 64-bit add");
        assert_eq!((massed.total(), massed.exact_exps, massed.carries), (10.0, 1.0, 1.0));
    }
    /// A histogram's loop of two keys, each weighed into its coarse bin (a float product and a
    /// value's add) and, behind its own branch, counted in a fine one (an add of 1): its
    /// weighed path takes both coarse adds and neither fine count; its costliest takes all.
    #[test]
    fn the_weighed_path_skips_the_fine_bins() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   LDS R4, [R2] ;
            /*0020*/                   LDS R5, [R2+0x400] ;
            /*0030*/                   FMUL R6, R4, 16 ;
            /*0040*/                   ATOMS.ADD RZ, [R6], R4 ;
            /*0050*/               @P0 BRA 0x70 ;
            /*0060*/                   ATOMS.POPC.INC.32 RZ, [R6+URZ+0x1000] ;
            /*0070*/                   FMUL R7, R5, 16 ;
            /*0080*/                   ATOMS.ADD RZ, [R7], R5 ;
            /*0090*/               @P1 BRA 0xb0 ;
            /*00a0*/                   ATOMS.POPC.INC.32 RZ, [R7+URZ+0x1000] ;
            /*00b0*/                   IADD3 R2, R2, 0x800, RZ ;
            /*00c0*/               @P2 BRA 0x10 ;
            /*00d0*/                   EXIT ;
        ";
        let l = &parse(listing)[0].onchip_loops()[0];
        assert_eq!((l.longest.total(), l.longest.mass_atomics), (12.0, 2.0));
        let weighed = l.weighed.as_ref().expect("a loop that sums and adds masses");
        assert_eq!((weighed.total(), weighed.mass_atomics), (10.0, 2.0));
    }
    /// A raced quad's block, then a column's exact score (the exact log's coefficient) behind
    /// its own branch: the scored path takes both; the noised path the block alone.
    #[test]
    fn finds_the_scored_path() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   LDG.E R4, desc[UR6][R2.64] ;
            /*0020*/               @P0 BRA 0x80 ;
            /*0030*/                   IMAD.WIDE.U32 R6, R6, -0x2daee0ad, RZ ;
            /*0040*/               @P2 BRA 0x80 ;
            /*0050*/                   FMUL R39, R25, 0.24279078841209411621 ;
            /*0060*/                   FADD R5, R39, R4 ;
            /*0070*/                   FADD R5, R5, R4 ;
            /*0080*/                   IADD3 R2, R2, 0x10, RZ ;
            /*0090*/               @P1 BRA 0x10 ;
            /*00a0*/                   EXIT ;
        ";
        let l = &parse(listing)[0].streaming_loops()[0];
        assert_eq!((l.common.total(), l.common.exact_logs), (4.0, 0.0));
        assert_eq!(l.noised.expect("a path through the block").total(), 6.0);
        let scored = l.scored.expect("a path through the exact log");
        assert_eq!((scored.total(), scored.philox, scored.exact_logs), (9.0, 1.0, 1.0));
        assert!(l.kept.is_none(), "no MUFU.LG2 in the listing");
    }
    /// A loop that weighs its keys (floats: counted along its costliest path) and looks up a
    /// table behind a key's branch: its items are the keys its cheapest path loads, not the
    /// lookups.
    #[test]
    fn a_lookup_behind_a_branch_is_no_item() {
        let listing = "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   LDS R4, [R2] ;
            /*0020*/               @P0 BRA 0x50 ;
            /*0030*/                   LDS R5, [R3] ;
            /*0040*/                   FMUL R4, R4, R5 ;
            /*0050*/                   IADD3 R2, R2, 0x400, RZ ;
            /*0060*/               @P1 BRA 0x10 ;
            /*0070*/                   EXIT ;
        ";
        let l = &parse(listing)[0].onchip_loops()[0];
        assert_eq!((l.common.total(), l.common.shared_loads), (6.0, 2.0), "the costliest path: it sums floats");
        assert_eq!(l.visits, 1.0);
    }

    /// A load waits for a round trip where the path used a value loaded since the last one began,
    /// not where it passes a branch: nvcc hoists a step's first load above its test of the step
    /// (every load of the step in flight together, one round trip), and a software-pipelined
    /// loop that uses a value before its next load makes two.
    #[test]
    fn a_round_trip_ends_where_a_loaded_value_is_used() {
        let listing = |between: &str| {
            format!(
                "\
            Function : k
            /*0000*/                   MOV R1, c[0x0][0x28] ;
            /*0010*/                   LDG.E R4, desc[UR6][R2.64] ;
            /*0020*/                   {between} ;
            /*0030*/               @P0 BRA 0x40 ;
            /*0040*/                   LDG.E R5, desc[UR6][R2.64+0x400] ;
            /*0050*/                   FADD R6, R4, R5 ;
            /*0060*/                   IADD3 R2, R2, 0x800, RZ ;
            /*0070*/               @P1 BRA 0x10 ;
            /*0080*/                   EXIT ;
        "
            )
        };
        let trips = |between: &str| parse(&listing(between))[0].streaming_loops()[0].common.round_trips;
        assert_eq!(trips("IADD3 R7, R7, 0x1, RZ"), 1.0, "a branch and an unrelated instruction between");
        assert_eq!(trips("FADD R7, R7, R4"), 2.0, "the first value used before the second load");
        assert_eq!(trips("MOV R4, RZ"), 1.0, "the loaded register overwritten, not read");
    }
}
