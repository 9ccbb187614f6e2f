//! Prints `docs/configuration.md`, rendered from the table:
//! `cargo run -q -p hlobridge-config --example config_doc > docs/configuration.md`.

fn main() {
    print!("{}", hlobridge_config::render_markdown());
}
