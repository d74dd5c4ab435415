//! `cargo xtask gen [--check]`: prints every kernel through both emitters, plus the Rust manifest
//! the crate loads them from, and compares with (or writes) the checked-in files.

use crate::last_part::{self, Lowering};
use crate::tuning::{self, Target};
use crate::{cuda, ir, kernels, out, wgsl};
use std::path::{Path, PathBuf};

const SOURCE: &str = "xtask/src/kernels";

/// What `filter_route` returns, in order: the one-read path takes the row; it may take the top-p
/// cut for its top-p or top-k; for min-p alone.
const ROUTE: [&str; 3] = ["one_read", "top_p_cut", "min_p_cut"];

/// Every generated file: its path relative to the workspace root and its text.
pub fn render() -> Result<Vec<(PathBuf, String)>, String> {
    let kernels = kernels::all();
    let wgpu = tuning::get(Target::Wgpu);
    let sm75 = tuning::get(Target::Sm75);
    let sm90 = tuning::get(Target::Sm90);
    if wgpu.part_block != wgpu.block {
        return Err("the tuning table's wgpu part block differs from its block: the wgpu host sizes every \
                    dispatch by the one WGPU_BLOCK"
            .into());
    }
    let mut files = Vec::new();
    let mut manifest = out::header("//", SOURCE);
    manifest.push_str(
        "//! The kernels `cargo xtask gen` wrote, with the launch shapes of the tuning table.\n\n\
         use crate::kernels::KernelSource;\n\n",
    );
    manifest.push_str(&format!(
        "/// Invocations per workgroup in every WGSL shader.\n#[cfg(feature = \"wgpu\")]\npub const WGPU_BLOCK: u32 = {};\n",
        wgpu.block
    ));
    manifest.push_str(&format!("/// Threads per block on compute capability 7.x and 8.x (tuned for the T4).\npub const CUDA_BLOCK_SM75: u32 = {};\n", sm75.block));
    manifest.push_str(&format!(
        "/// Threads per block on compute capability 9.0 and later.\npub const CUDA_BLOCK_SM90: u32 = {};\n",
        sm90.block
    ));
    manifest.push_str(&format!(
        "/// Threads per block of the kernels whose workgroup covers a fixed part of a row\n/// ([`KernelSource::fixed_part`]), on 7.x and 8.x, and on 9.0 and later.\npub const CUDA_PART_BLOCK_SM75: u32 = {};\npub const CUDA_PART_BLOCK_SM90: u32 = {};\n\n",
        sm75.part_block, sm90.part_block
    ));
    manifest.push_str(&format!(
        "/// u32 words in a row record (`RowParams`).\npub const ROW_WORDS: usize = {};\n/// The row mode of SGLang's seeded float64 race (else the Philox race).\npub const MODE_SEEDED: u32 = {};\n\n",
        kernels::abi::ROW_WORDS,
        kernels::abi::MODE_SEEDED
    ));
    manifest.push_str(&format!(
        "/// Temperatures below this are greedy in every kernel.\npub const GREEDY_EPS: f32 = {:?};\n/// Flag bits of the kernels' `flags` parameter: write log-probabilities; write statuses.\npub const FLAG_LOGPROBS: u32 = {};\npub const FLAG_STATUS: u32 = {};\n\n",
        kernels::abi::GREEDY_EPS,
        kernels::abi::FLAG_LOGPROBS,
        kernels::abi::FLAG_STATUS
    ));
    {
        use kernels::abi::{
            word, FLAG_ALLOWED, FLAG_CUT_HERE, FLAG_FILTERED_ONLY, FLAG_MERGE, FLAG_NAN_AS_FINITE, FLAG_PASSES,
            FLAG_ROW_LIST, FLAG_SEEDED_ONLY,
        };
        use kernels::filters;
        manifest.push_str(&format!(
            "/// Flag bits: write each row's pass count (filter kernels); take only the rows with a filter\n/// (filter kernels); take only the seeded rows without one (seeded kernels); take the rows of a\n/// list (filter and seeded kernels); the one-read path's merge is also the top-p cut's launch;\n/// the WGSL merge dispatch of a kernel that splits rows ([`KernelSource::merges`]).\npub const FLAG_PASSES: u32 = {FLAG_PASSES};\npub const FLAG_FILTERED_ONLY: u32 = {FLAG_FILTERED_ONLY};\npub const FLAG_SEEDED_ONLY: u32 = {FLAG_SEEDED_ONLY};\npub const FLAG_ROW_LIST: u32 = {FLAG_ROW_LIST};\npub const FLAG_CUT_HERE: u32 = {FLAG_CUT_HERE};\npub const FLAG_MERGE: u32 = {FLAG_MERGE};\n/// Flag bits of the logits stage read with the logits: the call's allowed-token bitmask is bound\n/// (`Binding::Allowed`); NaN logits read as -1e5.\npub const FLAG_ALLOWED: u32 = {FLAG_ALLOWED};\npub const FLAG_NAN_AS_FINITE: u32 = {FLAG_NAN_AS_FINITE};\n\n"
        ));
        manifest.push_str(&format!(
            "/// Word indices of the row record that the layout of `RowParams` is checked against.\npub const WORD_TEMPERATURE: usize = {};\npub const WORD_MODE: usize = {};\npub const WORD_TOP_K: usize = {};\npub const WORD_TOP_P: usize = {};\npub const WORD_MIN_P: usize = {};\npub const WORD_ORDER: usize = {};\npub const WORD_HASH: usize = {};\npub const WORD_PATH: usize = {};\npub const WORD_SEED: usize = {};\npub const WORD_OFFSET: usize = {};\n\n",
            word::TEMPERATURE, word::MODE, word::TOP_K, word::TOP_P, word::MIN_P, word::ORDER, word::HASH, word::PATH, word::SEED_LO, word::OFFSET_LO
        ));
        manifest.push_str(&format!(
            "/// The hash word's value for SGLang's rank hashing of a seeded row's filtered race (else the\n/// vocabulary id).\npub const HASH_SORTED_RANK: u32 = {};\n\n",
            kernels::abi::HASH_SORTED_RANK
        ));
        manifest.push_str(&format!(
            "/// The path word's values that force a filtered row onto the one-read path or the filter\n/// kernels (0: the routing's choice).\npub const PATH_ONE_READ: u32 = {};\npub const PATH_FILTER_KERNEL: u32 = {};\n\n",
            kernels::abi::PATH_ONE_READ,
            kernels::abi::PATH_FILTER_KERNEL
        ));
        manifest.push_str(&format!(
            "/// The order word's value for top-k first (0: joint).\npub const ORDER_TOP_K_FIRST: u32 = {};\n/// The order word's value for min-p first (vLLM v1's order).\npub const ORDER_MIN_P_FIRST: u32 = {};\n/// The longest row the filter kernels take (their fixed-point masses must not overflow).\npub const FILTER_MAX_VOCAB: usize = {};\n\n",
            filters::ORDER_TOP_K_FIRST,
            filters::ORDER_MIN_P_FIRST,
            filters::MAX_VOCAB
        ));
    }
    {
        use kernels::abi::{PARTS_SHIFT, PART_WORDS};
        use kernels::abi::{STAGE_BITS, STAGE_SHIFT};
        use kernels::filter_split::SLOT_WORDS;
        manifest.push_str(&format!(
            "/// Split rows: `flags >> PARTS_SHIFT` workgroups per row, each writing `PART_WORDS` u32 to\n/// `partials`; the row's last part (by its `counters` word) combines them in the same launch.\npub const PARTS_SHIFT: u32 = {PARTS_SHIFT};\npub const PART_WORDS: usize = {PART_WORDS};\n/// Staged kernels (the split filters): `(flags >> STAGE_SHIFT) & STAGE_BITS` is a launch's stage, and\n/// each (row, part) keeps `SLOT_WORDS` u32 of `partials` from one stage to the next.\npub const STAGE_SHIFT: u32 = {STAGE_SHIFT};\npub const STAGE_BITS: u32 = {STAGE_BITS:#x};\npub const SLOT_WORDS: usize = {SLOT_WORDS};\n\n"
        ));
    }
    {
        use kernels::filter_top_k::{CAP, PART_COLS, SLOT_WORDS};
        manifest.push_str(&format!(
            "/// The one-read top-k path: rows with top-k up to `TOP_K_CAP` split into parts of at most\n/// `TOP_K_PART_COLS` columns, each writing `TOP_K_SLOT_WORDS` u32 of `partials`.\npub const TOP_K_CAP: u32 = {CAP};\npub const TOP_K_PART_COLS: usize = {PART_COLS};\npub const TOP_K_SLOT_WORDS: usize = {SLOT_WORDS};\n\n"
        ));
    }
    let most = kernels.iter().map(|k| k.buffers.len()).max().unwrap_or(0);
    let stages = kernels.iter().map(|k| k.stages).max().unwrap_or(1);
    manifest.push_str(&format!(
        "/// The most buffers any kernel binds: launches list their bindings in arrays this long.\npub const MAX_BUFFERS: usize = {most};\n/// The most launches (stages) any kernel takes per call.\npub const MAX_STAGES: usize = {stages};\n\n"
    ));
    manifest.push_str(&crate::host::function(&kernels::filter_top_k::route(), "filter_route", &ROUTE)?);
    manifest.push('\n');
    manifest.push_str(&contracts(&kernels));
    let mut kernel_entries = String::new();
    let mut functions = Functions::default();
    let mut procedures = Procedures::default();
    // Each target lowers a split row's merge its own way (`last_part.rs`): one prepared kernel
    // for both where it has none. The WGSL lowerings are named after every kernel's CUDA one.
    let mut prepared_cuda = Vec::new();
    for k in &kernels {
        let mut prepared = crate::passes::prepare(&last_part::lower(k, Lowering::Fenced)?)?;
        procedures.name(&mut prepared, wgpu.block_for(k.workgroup))?;
        prepared_cuda.push(prepared);
    }
    let mut prepared_wgsl = Vec::new();
    for k in &kernels {
        let mut prepared = None;
        if last_part::has_merge(k) {
            let mut p = crate::passes::prepare(&last_part::lower(k, Lowering::MergeDispatch)?)?;
            procedures.name(&mut p, wgpu.block_for(k.workgroup))?;
            prepared = Some(p);
        }
        prepared_wgsl.push(prepared);
    }
    for ((k, prepared), for_wgsl) in kernels.iter().zip(&prepared_cuda).zip(&prepared_wgsl) {
        let block = wgpu.block_for(k.workgroup);
        let merges = for_wgsl.is_some();
        let for_wgsl = for_wgsl.as_ref().unwrap_or(prepared);
        let wgsl_path = format!("shaders/{}.wgsl", k.name);
        let cu_path = format!("kernels/{}.cu", k.name);
        let wgsl = wgsl::emit(for_wgsl, block, SOURCE)?;
        files.push((PathBuf::from(&wgsl_path), wgsl.text));
        let mut wgsl_parts = Vec::new();
        for (path, text) in wgsl.functions {
            wgsl_parts.push(format!("include_str!(\"../shaders/{path}\")"));
            functions.add(&k.name, &format!("shaders/{path}"), text)?;
        }
        // A kernel that holds u64 as words is for devices CUDA never is: WGSL only.
        let cuda = if k.u64_as_words {
            "None".to_string()
        } else {
            let cuda = cuda::emit(prepared, sm75.block_for(k.workgroup), SOURCE)?;
            files.push((PathBuf::from(&cu_path), cuda.text));
            for (path, text) in cuda.functions {
                functions.add(&k.name, &format!("kernels/{path}"), text)?;
            }
            format!("Some(include_str!(\"../{cu_path}\"))")
        };
        wgsl_parts.push(format!("include_str!(\"../{wgsl_path}\")"));
        let wgsl = match wgsl_parts.as_slice() {
            [one] => one.clone(),
            _ => format!("concat!(\n            {},\n        )", wgsl_parts.join(",\n            ")),
        };
        let bindings: Vec<String> = k.buffers.iter().map(|b| format!("Binding::{}", camel(&b.name))).collect();
        kernel_entries.push_str(&format!(
            "    KernelSource {{\n        id: KernelId::{},\n        name: {:?},\n        wgsl: {wgsl},\n        cuda: {cuda},\n        bindings: &[{}],\n        passes: {},\n        stages: {},\n        merges: {merges},\n        fixed_part: {},\n        needs_f64: {},\n        needs_int64: {},\n        workgroup_bytes: {},\n    }},\n",
            camel(&k.name),
            k.name,
            bindings.join(", "),
            k.passes,
            k.stages,
            k.workgroup == tuning::Workgroup::Part,
            ir::uses(k, ir::Ty::F64),
            // Float64 code reads its bits as u64 (NaN and infinity tests), so it needs both; a
            // kernel that holds u64 as words in WGSL needs neither.
            (ir::uses(k, ir::Ty::U64) && !k.u64_as_words) || ir::uses(k, ir::Ty::F64),
            wgsl::workgroup_bytes(for_wgsl, block)?
        ));
    }
    manifest.push_str(
        "/// The functions the CUDA kernels include, by the path their `#include` names (relative to\n\
         /// `kernels/`): NVRTC takes one source, so `KernelSource::cuda_unit` puts them in its place.\n\
         pub const CUDA_FUNCTIONS: &[(&str, &str)] = &[\n",
    );
    for path in functions.files.iter().filter_map(|(p, ..)| p.strip_prefix("kernels/")) {
        manifest.push_str(&format!("    ({path:?}, include_str!(\"../kernels/{path}\")),\n"));
    }
    manifest.push_str("];\n\npub const KERNELS: &[KernelSource] = &[\n");
    manifest.push_str(&kernel_entries);
    manifest.push_str("];\n");
    files.extend(functions.files.into_iter().map(|(p, t, _)| (PathBuf::from(p), t)));
    files.push((PathBuf::from("src/generated.rs"), manifest));
    Ok(files)
}

/// The procedures of the kernels printed so far, by the names they are printed under, with their
/// CUDA and WGSL texts.
#[derive(Default)]
struct Procedures(Vec<(String, String, String)>);

impl Procedures {
    /// Names `kernel`'s procedures (callees first, as the outlining pass orders them) so that a
    /// procedure another kernel prints the same way on both targets takes its name, and so its
    /// file, and one printed otherwise a name of its own: the builder's (`sk_read_step`), then
    /// numbered.
    fn name(&mut self, kernel: &mut crate::passes::Prepared, block: u32) -> Result<(), String> {
        let local: Vec<String> = kernel.procedures.iter().map(|p| p.name.clone()).collect();
        for (i, name) in local.iter().enumerate() {
            kernel.rename_procedure(name, &format!("sk_unnamed_{i}"));
        }
        let mut named: Vec<String> = Vec::new();
        for (i, name) in local.iter().enumerate() {
            let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
            let base = base.strip_suffix('_').filter(|_| base.len() < name.len()).unwrap_or(name);
            let mut current = format!("sk_unnamed_{i}");
            for n in 1.. {
                let candidate = if n == 1 { base.to_string() } else { format!("{base}_{n}") };
                if named.contains(&candidate) {
                    continue;
                }
                kernel.rename_procedure(&current, &candidate);
                current = candidate.clone();
                let proc = kernel.procedures.iter().find(|p| p.name == candidate).expect("just named");
                let texts = (cuda::procedure_macro(kernel, proc)?, wgsl::procedure_fn(kernel, block, proc)?);
                match self.0.iter().find(|(n, ..)| *n == candidate) {
                    Some((_, c, w)) if (c, w) != (&texts.0, &texts.1) => continue,
                    Some(_) => {}
                    None => self.0.push((candidate.clone(), texts.0, texts.1)),
                }
                named.push(candidate);
                break;
            }
        }
        Ok(())
    }
}

/// The function files: each written once, whichever kernels call it; a function whose text
/// differs between two kernels is an error, not a second file.
#[derive(Default)]
struct Functions {
    /// Path, text, and the first kernel that called it.
    files: Vec<(String, String, String)>,
}

impl Functions {
    fn add(&mut self, kernel: &str, path: &str, text: String) -> Result<(), String> {
        match self.files.iter().find(|(p, ..)| p == path) {
            Some((_, t, first)) if *t != text => {
                Err(format!("{path}: kernels {first} and {kernel} print it differently"))
            }
            Some(_) => Ok(()),
            None => {
                self.files.push((path.to_string(), text, kernel.to_string()));
                Ok(())
            }
        }
    }
}

/// `softmax_f32` as a Rust type name: `SoftmaxF32`.
fn camel(snake: &str) -> String {
    snake
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// The typed contracts of the manifest: an id per kernel (its index in `KERNELS`) and a name per
/// storage buffer any kernel binds, so the host picks kernels and binds buffers by name and a
/// kernel renamed or a buffer no kernel binds any more fails to compile.
fn contracts(kernels: &[ir::Kernel]) -> String {
    let mut text = String::from(
        "/// Every generated kernel: `KERNELS[id as usize]` is its source (see `KernelId::source`).\n\
         #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\npub enum KernelId {\n",
    );
    for k in kernels {
        text.push_str(&format!("    /// `{}`: {}\n    {},\n", k.name, k.doc.replace('\n', " "), camel(&k.name)));
    }
    text.push_str("}\n\n");
    let mut names: Vec<&str> = Vec::new();
    for b in kernels.iter().flat_map(|k| &k.buffers) {
        if !names.contains(&b.name.as_str()) {
            names.push(&b.name);
        }
    }
    // Which kernels see a binding as atomic u32 (another workgroup of the launch reads it): the
    // host binds the same buffer either way, and a word of it left set breaks the next call.
    let atomic = |n: &str| -> Vec<&str> {
        kernels
            .iter()
            .filter(|k| k.buffers.iter().any(|b| b.name == n && b.storage == ir::Storage::AtomicU32))
            .map(|k| k.name.as_str())
            .collect()
    };
    text.push_str(
        "/// The storage buffers the kernels bind, by the names their IR gives them; each kernel's\n\
         /// `bindings` lists its own in binding order.\n\
         #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]\npub enum Binding {\n",
    );
    for n in &names {
        let by = atomic(n);
        let note = if by.is_empty() { String::new() } else { format!(" (atomic u32 in {})", by.join(", ")) };
        text.push_str(&format!("    /// `{n}`{note}\n    {},\n", camel(n)));
    }
    text.push_str("}\n\nimpl Binding {\n    /// The buffer's name in the IR and the generated code.\n    pub const fn name(self) -> &'static str {\n        match self {\n");
    for n in &names {
        text.push_str(&format!("            Binding::{} => {n:?},\n", camel(n)));
    }
    text.push_str("        }\n    }\n}\n\n");
    text
}

/// Writes the files, or with `check` reports every one that differs and fails.
pub fn run(root: &Path, check: bool) -> Result<(), String> {
    let files = render()?;
    let mut stale = Vec::new();
    for (rel, text) in &files {
        let path = root.join(rel);
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() == Some(text.as_str()) {
            continue;
        }
        if check {
            stale.push(rel.display().to_string());
        } else {
            std::fs::create_dir_all(path.parent().expect("has a folder")).map_err(|e| e.to_string())?;
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
            println!("wrote {}", rel.display());
        }
    }
    // Generated files nobody generates any more are drift too.
    for dir in ["shaders", "kernels", "shaders/functions", "kernels/functions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else { continue };
        for entry in entries {
            let entry = entry.map_err(|e| e.to_string())?;
            let rel = Path::new(dir).join(entry.file_name());
            if entry.path().is_dir() && rel.ends_with("functions") {
                continue;
            }
            if !files.iter().any(|(p, _)| p == &rel) {
                if check {
                    stale.push(format!("{} (no longer generated)", rel.display()));
                } else {
                    std::fs::remove_file(root.join(&rel)).map_err(|e| e.to_string())?;
                    println!("removed {}", rel.display());
                }
            }
        }
    }
    if stale.is_empty() {
        if check {
            println!("generated files are fresh ({} files)", files.len());
        }
        Ok(())
    } else {
        Err(format!("generated files differ from `cargo xtask gen`: {}", stale.join(", ")))
    }
}
