//! The ordered claim's heads on MySQL/MariaDB (see `driver/ordered.rs`): the candidates as a
//! derived table read first (`STRAIGHT_JOIN` for a window, in its order) and joined to `e`,
//! the checks on `e` row by row; InnoDB skips locked rows while reading, so the `LIMIT` needs
//! no slack.
use sea_orm::sea_query::{Alias, Expr, ExprTrait, JoinType, SelectStatement};
use sea_orm_outbox_entity::event_record::Column;

use crate::driver::ordered::{HeadsFrom, CANDIDATE, WINDOW};
use crate::driver::Driver;

/// `FROM (<c>) AS w STRAIGHT_JOIN t_event_record AS e ON e.id = w.id ... ORDER BY
/// w.next_retry_time` for a window, which also reads `next_retry_time` (the derived table is
/// sorted first and joined in that order), `INNER JOIN` and `ORDER BY e.next_retry_time` for
/// the deep candidates.
pub(crate) fn from_candidates(
    driver: Driver,
    q: &mut SelectStatement,
    mut c: SelectStatement,
    window: bool,
) -> HeadsFrom {
    let (e, w) = (Alias::new(CANDIDATE), Alias::new(WINDOW));
    let (join, ordered_by) = if window {
        c.column(Column::NextRetryTime);
        (JoinType::StraightJoin, w.clone())
    } else {
        (JoinType::InnerJoin, e.clone())
    };
    q.from_subquery(c, w.clone()).join_as(
        join,
        driver.table(),
        e.clone(),
        Expr::col((e, Column::Id)).equals((w, Column::Id)),
    );
    HeadsFrom {
        checks_here: true,
        ordered_by,
    }
}

#[cfg(test)]
mod tests {
    use crate::config::OrderedPolicy;
    use crate::driver::{Driver, HeadScan};

    #[test]
    fn the_window_is_read_first_in_its_order() {
        let q = Driver::MySql.ordered_heads_query(
            OrderedPolicy::Block,
            1,
            true,
            HeadScan::for_heads(1),
        );
        let my = Driver::MySql.build(&q).to_string();
        assert!(
            my.contains("AS `w` STRAIGHT_JOIN `t_event_record` AS `e`"),
            "{my}"
        );
        assert!(
            my.contains("ORDER BY `w`.`next_retry_time` ASC LIMIT 1 "),
            "{my}"
        );
    }
}
