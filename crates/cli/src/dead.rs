//! `hookfleet dead …`: the dead-letter list (jobs a worker could not use, or
//! that killed their workers too often). A dead letter never holds an event
//! hostage: a job that names a row still has its row, which the sweeper
//! enqueues again once it is due.

use anyhow::bail;
use clap::Subcommand;

use hookfleet_core::dead::DeadLetter;
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
    },
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

pub async fn run(queue: &RedisQueue, command: DeadCommand) -> anyhow::Result<()> {
    match command {
        DeadCommand::List { limit, json } => {
            let letters = queue.dead_letters(limit as isize).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&letters)?);
            } else {
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
            }
        }
        DeadCommand::Show { id, json } => {
            let Some(d) = queue.dead_letter_by_id(&id).await? else {
                bail!("no dead letter {id:?}")
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                print_one(&d);
            }
        }
        DeadCommand::Requeue { id: Some(id), .. } => match queue.requeue_dead(&id).await? {
            Some(d) => println!(
                "requeued {} onto {}",
                d.id,
                if d.queue.is_empty() {
                    "default"
                } else {
                    &d.queue
                }
            ),
            None => bail!("no dead letter {id:?}"),
        },
        DeadCommand::Requeue { id: None, .. } => {
            let mut n = 0;
            for d in queue
                .dead_letters(hookfleet_core::dead::DEAD_LETTER_LIMIT)
                .await?
            {
                if queue.requeue_dead(&d.id).await?.is_some() {
                    n += 1;
                }
            }
            println!("requeued {n} dead letters");
        }
        DeadCommand::Purge { id: Some(id), .. } => {
            if !queue.purge_dead(&id).await? {
                bail!("no dead letter {id:?}");
            }
            println!("purged {id}");
        }
        DeadCommand::Purge { id: None, .. } => {
            let n = queue.purge_all_dead().await?;
            println!("purged {n} dead letters");
        }
    }
    Ok(())
}
