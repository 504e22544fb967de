//! The RoomState conformance suite (tests/common/room_state.rs) on the embedded state; on Redis it
//! runs in tests/room_redis.rs.
//!
//! `cargo nextest run -p wicket-edge --test room_state`

mod common;

use wicket_edge::room::state::EmbeddedState;
use wicket_edge::room::unix_ms;

#[tokio::test]
async fn the_embedded_room_state_passes_the_conformance_suite() {
    common::room_state::conformance(&EmbeddedState::new(1000), unix_ms()).await;
}

#[tokio::test]
async fn owed_places_are_fixed_at_arrival_held_back_at_their_turn_and_lost_after_the_grace() {
    common::room_state::owed_places(&EmbeddedState::new(1000), "n", 1_000_000).await;
}

#[tokio::test]
async fn the_invite_lane_takes_its_share_of_each_release_in_join_order() {
    common::room_state::lane_places(&EmbeddedState::new(1000), "n", 1_000_000).await;
}
