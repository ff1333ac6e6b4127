//! `lfm serve`: its flags into lfm-call's serve (transports, the typed protocol, the engine).

use std::time::Duration;

use lfm_call::serve::{serve as run_serve, ServeConfig};
use lfm_call::ErrorKind;
use lfm_monitor::gpu::GpuPolicy;
use lfm_monitor::limits::{parse_duration, parse_positive, parse_size};
use lfm_sizing::admission::NodeBudget;
use lfm_sizing::history::default_path;

use crate::cli::ServeArgs;
use crate::monitoring::{self, EXIT_MONITOR_FAILED, EXIT_USAGE};

const EXIT_TARGET_NOT_FOUND: i32 = 3;

pub fn serve(args: ServeArgs) -> i32 {
    match config(args).and_then(|config| run_serve(config).map_err(exit_of)) {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("error: {message}");
            code
        }
    }
}

fn exit_of(error: lfm_call::CallError) -> (i32, String) {
    let code = match error.kind {
        ErrorKind::Usage => EXIT_USAGE,
        ErrorKind::NotFound => EXIT_TARGET_NOT_FOUND,
        ErrorKind::Failed => EXIT_MONITOR_FAILED,
    };
    (code, error.message)
}

fn config(args: ServeArgs) -> Result<ServeConfig, (i32, String)> {
    let usage = |e: lfm_monitor::limits::LimitError| (EXIT_USAGE, e.to_string());
    let grace = parse_duration("--grace", &args.grace).map_err(usage)?;
    let idle = args
        .idle_timeout
        .as_deref()
        .map(|idle| parse_duration("--idle-timeout", idle))
        .transpose()
        .map_err(usage)?;
    let learn_max = parse_size("--learn-max", &args.learn_max).map_err(usage)?;
    let node_memory = args
        .node_memory
        .as_deref()
        .map(|size| parse_size("--node-memory", size))
        .transpose()
        .map_err(usage)?;
    let node_cores = args
        .node_cores
        .as_deref()
        .map(|cores| parse_positive("--node-cores", cores))
        .transpose()
        .map_err(usage)?;
    let interpreter = args
        .interpreter
        .choice(args.cache_dir.as_deref())
        .interpreter()
        .map_err(exit_of)?;
    Ok(ServeConfig {
        interpreter,
        functions: args.functions,
        preload: args.preload,
        cores_per_slot: args.cores_per_slot,
        slots: args.slots as usize,
        zygotes: args.zygotes.unwrap_or(0) as usize,
        node: NodeBudget::detect(node_memory, node_cores),
        gpus_per_slot: args.gpus_per_slot,
        gpu: GpuPolicy {
            wait: Duration::ZERO,
            violation: monitoring::violation_policy(args.gpu_violation),
        },
        backend: monitoring::backend_choice(args.backend),
        history: (!args.no_history).then(|| args.history.unwrap_or_else(default_path)),
        cache: monitoring::cache_dir(args.cache_dir.as_ref()),
        analysis_cache: args.cache_dir.clone(),
        socket: args.socket,
        grace: Duration::from_secs_f64(grace),
        idle: idle.map(Duration::from_secs_f64),
        learn_budget: (!args.no_learn).then_some(learn_max),
    })
}
