//! Generates the cluster's gRPC services (JobManager, TaskManager) from Rust definitions: messages are serde types sent as JSON, so no protoc is needed.

use tonic_build::manual::{Builder, Method, Service};

fn method(name: &str, route: &str, input: &str, output: &str) -> Method {
    Method::builder()
        .name(name)
        .route_name(route)
        .input_type(format!("crate::cluster::protocol::{input}"))
        .output_type(format!("crate::cluster::protocol::{output}"))
        .codec_path("crate::cluster::codec::JsonCodec")
        .build()
}

fn main() {
    let job_manager = Service::builder()
        .name("JobManager")
        .package("weir.cluster")
        .method(method(
            "register",
            "Register",
            "RegisterTaskManager",
            "Registered",
        ))
        .method(method("heartbeat", "Heartbeat", "Heartbeat", "HeartbeatAck"))
        .method(method("submit", "Submit", "SubmitJob", "Submitted"))
        .method(method("job", "Job", "JobQuery", "JobReport"))
        .method(method("part_ended", "PartEnded", "PartEnded", "Done"))
        .method(method("report", "Report", "Report", "Done"))
        .method(method("jobs", "Jobs", "JobsQuery", "JobList"))
        .method(method(
            "savepoint",
            "Savepoint",
            "SavepointRequest",
            "SavepointDone",
        ))
        .method(method("cancel", "Cancel", "JobQuery", "Done"))
        .build();
    let task_manager = Service::builder()
        .name("TaskManager")
        .package("weir.cluster")
        .method(method("deploy", "Deploy", "DeployPart", "Done"))
        .method(method("cancel", "Cancel", "CancelPart", "Done"))
        .method(method("control", "Control", "Control", "Done"))
        .method(method("abort", "Abort", "AbortCheckpoint", "Done"))
        .method(method("metrics", "Metrics", "MetricsQuery", "TaskFigures"))
        .build();
    Builder::new().compile(&[job_manager, task_manager]);
}
