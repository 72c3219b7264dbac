//! `hookfleet dead …`: the dead-letter list (jobs a worker could not use, or
//! that killed their workers too often). A dead letter never holds an event
//! hostage: a job that names a row still has its row, which the sweeper
//! enqueues again once it is due.

use clap::Subcommand;

use hookfleet_admin::dead;
use hookfleet_core::queue::DeadLetter;
use hookfleet_core::queue::RedisQueue;

use crate::table;

#[derive(Subcommand)]
pub enum DeadCommand {
    /// List dead letters, newest first.
    List {
        /// At most this many dead letters.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(i64).range(1..=10_000))]
        limit: i64,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Show one dead letter.
    Show {
        /// The dead letter's id (from `dead list`).
        id: String,
        /// Print one JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Put dead letters back on their queues (one by ID, or --all).
    Requeue {
        /// The dead letter's id (from `dead list`).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Requeue every dead letter.
        #[arg(long)]
        all: bool,
    },
    /// Delete dead letters (one by ID, or --all).
    Purge {
        /// The dead letter's id (from `dead list`).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        id: Option<String>,
        /// Delete every dead letter.
        #[arg(long)]
        all: bool,
        /// Do not ask first (with --all at a terminal, it asks).
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

pub async fn run(queue: &RedisQueue, command: DeadCommand) -> anyhow::Result<()> {
    match command {
        DeadCommand::List { limit, json } => list(queue, limit, json).await?,
        DeadCommand::Show { id, json } => {
            let d = dead::show(queue, &id).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print_one(&d);
            }
        }
        DeadCommand::Requeue { id: Some(id), .. } => {
            let d = dead::requeue(queue, &id).await?;
            println!("requeued {} onto {}", d.id, d.queue);
        }
        DeadCommand::Requeue { id: None, .. } => {
            let n = dead::requeue_all(queue).await?;
            println!("requeued {n} dead letters");
        }
        DeadCommand::Purge { id: Some(id), .. } => {
            dead::purge(queue, &id).await?;
            println!("purged {id}");
        }
        DeadCommand::Purge { id: None, yes, .. } => {
            // Only a person is asked, so only then are they counted.
            if !yes && crate::ask::person_present() {
                let n = queue.dead().count().await?;
                let question = format!(
                    "Delete every dead letter? There are {n}; their rows stay in Postgres, but the jobs are gone."
                );
                if n > 0 && !crate::ask::confirmed(&question, false) {
                    anyhow::bail!("cancelled: no dead letter purged");
                }
            }
            let n = dead::purge_all(queue).await?;
            println!("purged {n} dead letters");
        }
    }
    Ok(())
}

async fn list(queue: &RedisQueue, limit: i64, json: bool) -> anyhow::Result<()> {
    let letters = dead::list(queue, limit as isize).await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&letters)?);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.at.clone(),
                d.queue.clone(),
                table::clip(&d.job, 40),
                table::clip(&d.reason, 70),
            ]
        })
        .collect();
    table::print(&["ID", "AT", "QUEUE", "JOB", "REASON"], &rows);
    Ok(())
}

fn print_one(d: &DeadLetter) {
    println!("id            {}", d.id);
    println!("at            {}", d.at);
    println!("queue         {}", d.queue);
    println!("worker        {}", d.worker);
    println!("reason        {}", d.reason);
    println!("job           {}", d.job);
    if !d.died_holding.is_empty() {
        println!("died holding  {}", d.died_holding.join(", "));
    }
}
