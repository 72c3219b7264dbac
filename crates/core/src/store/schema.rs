//! Diesel's view of the tables created by `migrations/`.

pub mod sql_types {
    /// The Postgres enum `delivery_status` (see [`crate::domain::DeliveryStatus`]).
    #[derive(diesel::sql_types::SqlType, diesel::query_builder::QueryId)]
    #[diesel(postgres_type(name = "delivery_status"))]
    pub struct DeliveryStatus;
}

diesel::table! {
    webhooks (id) {
        id -> Int8,
        name -> Text,
        entity_type -> Text,
        event -> Text,
        request_url -> Text,
        dynamic_url -> Bool,
        request_method -> Text,
        request_structure -> Text,
        body_template -> Nullable<Text>,
        fields -> Jsonb,
        headers -> Jsonb,
        condition -> Nullable<Text>,
        enabled -> Bool,
        secret -> Nullable<Text>,
        previous_secret -> Nullable<Text>,
        previous_secret_expires_at -> Nullable<Timestamptz>,
        timeout_ms -> Int4,
        queue -> Text,
        max_retries -> Int4,
        max_concurrency -> Nullable<Int4>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        allowed_hosts -> Array<Text>,
        paused_at -> Nullable<Timestamptz>,
        paused_reason -> Nullable<Text>,
        rate_limit -> Nullable<Int4>,
        releasing -> Bool,
        frappe_body -> Bool,
    }
}

diesel::table! {
    webhook_health (webhook_id) {
        webhook_id -> Int8,
        consecutive_failures -> Int4,
        failing_since -> Nullable<Timestamptz>,
        last_success_at -> Nullable<Timestamptz>,
        last_error -> Nullable<Text>,
        last_attempt_at -> Nullable<Timestamptz>,
    }
}

diesel::table! {
    webhook_health_hourly (webhook_id, hour, bucket) {
        webhook_id -> Int8,
        hour -> Timestamptz,
        bucket -> Int2,
        attempts -> Int4,
        successes -> Int4,
    }
}

diesel::table! {
    webhook_config_version (singleton) {
        singleton -> Bool,
        version -> Int8,
    }
}

diesel::table! {
    use diesel::sql_types::*;
    use super::sql_types::DeliveryStatus;

    webhook_request_logs (id) {
        id -> Int8,
        event_id -> Text,
        webhook_id -> Nullable<Int8>,
        webhook_name -> Text,
        entity_type -> Text,
        entity_name -> Text,
        event -> Text,
        url -> Text,
        method -> Text,
        headers -> Jsonb,
        body -> Text,
        queue -> Text,
        status -> DeliveryStatus,
        attempts -> Int4,
        max_attempts -> Int4,
        next_retry -> Nullable<Timestamptz>,
        lease_expires_at -> Nullable<Timestamptz>,
        response_code -> Nullable<Int4>,
        response_body -> Nullable<Bytea>,
        error -> Nullable<Text>,
        created_at -> Timestamptz,
        updated_at -> Timestamptz,
        claim_token -> Int8,
        traceparent -> Nullable<Text>,
    }
}

diesel::table! {
    webhook_delivery_attempts (log_id, attempt) {
        log_id -> Int8,
        attempt -> Int4,
        started_at -> Timestamptz,
        duration_ms -> Int4,
        response_code -> Nullable<Int4>,
        error -> Nullable<Text>,
        worker -> Text,
    }
}

diesel::joinable!(webhook_request_logs -> webhooks (webhook_id));
diesel::joinable!(webhook_delivery_attempts -> webhook_request_logs (log_id));
diesel::allow_tables_to_appear_in_same_query!(
    webhooks,
    webhook_health,
    webhook_health_hourly,
    webhook_request_logs,
    webhook_delivery_attempts
);
